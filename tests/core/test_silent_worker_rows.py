"""Running rows of a worker gone silent are settled within seconds of its silence, not
after the reconciler's long grace (``RECONCILE_GRACE_SECONDS``, an hour here): from the
settled record when the worker acked the job before it died, by a re-enqueue when Redis
no longer holds the job. A worker that still heartbeats keeps its rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job, JobStatus
from tests.helpers import point_at

pytestmark = pytest.mark.django_db(transaction=True)


def _running_on(job_id: str, worker_id: str, seconds_ago: float = 30) -> None:
    """The row as the worker's audit wrote it when the run started, ``seconds_ago``."""
    Job.objects.filter(pk=job_id).update(
        status=JobStatus.RUNNING, worker_id=worker_id, attempts=1,
        started_at=timezone.now() - timedelta(seconds=seconds_ago),
        updated_at=timezone.now() - timedelta(seconds=seconds_ago))


def _look(reconciler: Reconciler) -> Job:
    reconciler.tick()  # the first look: a suspect
    reconciler._confirm(force=True)  # the second look, without waiting for it
    return Job.objects.get()


@pytest.fixture
def engine(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, RECONCILE_GRACE_SECONDS=3600)
    return get_engine()


def test_a_silent_workers_acked_job_is_settled_from_its_record(engine) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop")
    [job] = engine.claim("default", 1, lease_ms=60_000).jobs
    assert engine.ack("default", [(job.id, job.token)], holder="gone:1") == [True]
    _running_on(h.id, "gone:1")  # its flush of the success died with it

    row = _look(Reconciler(engine, get_settings(), ("default",)))

    assert row.status == JobStatus.SUCCEEDED and row.attempts == 1
    assert engine.inspect("default", h.id).place == ""  # not run again


def test_a_silent_workers_job_that_redis_lost_is_enqueued_again(engine) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop")
    [job] = engine.claim("default", 1, lease_ms=60_000).jobs
    assert engine.ack("default", [(job.id, job.token)]) == [True]  # no record: as if lost
    _running_on(h.id, "gone:2")

    row = _look(Reconciler(engine, get_settings(), ("default",)))

    assert row.status == JobStatus.RUNNING  # its run is lost: it runs again
    assert engine.inspect("default", h.id).place == "pending"


def test_a_heartbeating_workers_running_rows_are_left_to_it(engine) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop")
    [job] = engine.claim("default", 1, lease_ms=60_000).jobs
    assert engine.ack("default", [(job.id, job.token)], holder="alive:1") == [True]
    _running_on(h.id, "alive:1")
    engine.register_worker("alive:1", "{}")  # its flush is on its way (a slow database)

    row = _look(Reconciler(engine, get_settings(), ("default",)))

    assert row.status == JobStatus.RUNNING


def test_a_row_that_started_moments_ago_is_not_looked_at(engine) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop")
    [job] = engine.claim("default", 1, lease_ms=60_000).jobs
    assert engine.ack("default", [(job.id, job.token)], holder="gone:3") == [True]
    _running_on(h.id, "gone:3", seconds_ago=0)  # within two leases: its worker may live

    row = _look(Reconciler(engine, get_settings(), ("default",)))

    assert row.status == JobStatus.RUNNING


def test_a_worker_that_beats_again_before_the_second_look_keeps_its_rows(engine) -> None:  # type: ignore[no-untyped-def]
    """As after a Redis stall: every beat is old at the first look, the worker's next
    beat comes before the second look (a lease later)."""
    h = schedule("tests.jobs.noop")
    [job] = engine.claim("default", 1, lease_ms=60_000).jobs
    assert engine.ack("default", [(job.id, job.token)], holder="stalled:1") == [True]
    _running_on(h.id, "stalled:1")
    engine.client.zadd(engine.global_keys.workers, {"stalled:1": engine.time_ms() - 60_000})
    reconciler = Reconciler(engine, get_settings(), ("default",))
    reconciler.tick()
    assert h.id in reconciler._suspects  # silent at the first look
    reconciler._confirm()
    assert h.id in reconciler._suspects  # the second look waits a lease
    engine.register_worker("stalled:1", "{}")  # its heartbeat, Redis back

    row = _look(reconciler)

    assert row.status == JobStatus.RUNNING  # its own flush will write it
