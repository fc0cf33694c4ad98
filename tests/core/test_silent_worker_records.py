"""Jobs a worker acked before it went silent are settled from their settled records within
seconds of the silence, whatever their rows say (``scheduled``, ``retrying``, a
``running`` row changed lately), not after the reconciler's long grace
(``RECONCILE_GRACE_SECONDS``, an hour here): ``core/reconcile_records.py``. A worker that
still heartbeats keeps its records; a record written moments ago waits; a silent worker's
record whose row is final already is forgotten."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core import reconcile_state
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine, reset
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job, JobStatus
from tests.helpers import point_at

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def engine(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, RECONCILE_GRACE_SECONDS=3600)
    return get_engine()


def _acked_by(engine, holder: str, seconds_ago: float = 60) -> str:  # type: ignore[no-untyped-def]
    """A job run and acked by ``holder`` ``seconds_ago`` (its settled record dated then),
    its row as ``schedule()`` wrote it: the worker's flush never landed."""
    h = schedule("tests.jobs.noop")
    [job] = engine.claim("default", 1, lease_ms=60_000).jobs
    assert engine.ack("default", [(job.id, job.token)], holder=holder) == [True]
    engine.client.zadd(engine.keys("default").settled,
                       {h.id: engine.time_ms() - int(seconds_ago * 1000)})
    return h.id


def _look(reconciler: Reconciler) -> Job:
    reconciler.tick()  # the first look: a suspect
    reconciler._confirm(force=True)  # the second look, without waiting for it
    return Job.objects.get()


@pytest.mark.parametrize("status", [JobStatus.SCHEDULED, JobStatus.RETRYING, JobStatus.RUNNING])
def test_a_silent_workers_acked_job_is_settled_whatever_its_row_says(engine, status) -> None:  # type: ignore[no-untyped-def]
    job_id = _acked_by(engine, "gone:1")
    # a running row changed a moment ago: not one of ``Liveness.orphaned``'s
    Job.objects.filter(pk=job_id).update(status=status, worker_id="gone:1",
                                         updated_at=timezone.now() - timedelta(seconds=1))

    row = _look(Reconciler(engine, get_settings(), ("default",)))

    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 1)
    assert row.last_error == reconcile_state.SUCCEEDED_IN_REDIS
    assert engine.inspect("default", job_id).place == ""  # not run again
    assert engine.presence("default", [job_id])[0].settled is None  # the record is gone


def test_a_heartbeating_workers_records_are_left_to_it(engine) -> None:  # type: ignore[no-untyped-def]
    job_id = _acked_by(engine, "alive:1")
    engine.register_worker("alive:1", "{}")  # its flush is on its way (a slow database)
    reconciler = Reconciler(engine, get_settings(), ("default",))

    row = _look(reconciler)

    assert row.status == JobStatus.SCHEDULED and not reconciler._suspects
    assert engine.presence("default", [job_id])[0].settled is not None


def test_a_worker_that_beats_again_before_the_second_look_keeps_its_records(engine) -> None:  # type: ignore[no-untyped-def]
    job_id = _acked_by(engine, "stalled:1")
    engine.client.zadd(engine.global_keys.workers, {"stalled:1": engine.time_ms() - 60_000})
    reconciler = Reconciler(engine, get_settings(), ("default",))
    reconciler.tick()
    assert job_id in reconciler._suspects  # silent at the first look
    engine.register_worker("stalled:1", "{}")  # its heartbeat, Redis back

    row = _look(reconciler)

    assert row.status == JobStatus.SCHEDULED  # its own flush will write it


def test_a_record_written_moments_ago_waits(engine) -> None:  # type: ignore[no-untyped-def]
    """Within two leases of its ack its worker may still be alive (and not registered
    yet, or a bare engine's caller): the record is not read."""
    _acked_by(engine, "gone:2", seconds_ago=0)
    reconciler = Reconciler(engine, get_settings(), ("default",))

    row = _look(reconciler)

    assert row.status == JobStatus.SCHEDULED and not reconciler._suspects


def test_a_silent_workers_record_of_a_final_row_is_forgotten(engine) -> None:  # type: ignore[no-untyped-def]
    """Its flush landed; it was killed before it forgot the record."""
    job_id = _acked_by(engine, "gone:3")
    Job.objects.filter(pk=job_id).update(status=JobStatus.SUCCEEDED, attempts=1,
                                         last_error="", result="1")

    row = _look(Reconciler(engine, get_settings(), ("default",)))

    assert (row.status, row.last_error) == (JobStatus.SUCCEEDED, "")  # untouched
    assert engine.presence("default", [job_id])[0].settled is None


def test_the_records_of_each_shard_of_a_sharded_queue_are_read(settings, engine) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "QUEUE_OPTIONS": {"emails": {"shards": 3}}}
    reset()
    engine = get_engine()
    ids = [schedule("tests.jobs.noop", i, queue="emails").id for i in range(12)]
    claimed = engine.claim("emails", 12, lease_ms=60_000).jobs
    assert sorted(j.id for j in claimed) == sorted(ids)
    assert all(engine.ack("emails", [(j.id, j.token)], holder="gone:4") == [True] for j in claimed)
    assert len({engine.home_of("emails", pk) for pk in ids}) == 3
    for pk in ids:  # each record dated a minute ago, in its shard
        engine.client.zadd(engine.keys(engine.home_of("emails", pk)).settled,
                           {pk: engine.time_ms() - 60_000})
    reconciler = Reconciler(engine, get_settings(), ("emails",))
    reconciler.tick()
    reconciler._confirm(force=True)

    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.SUCCEEDED}
