"""``purge_queue`` cancels the rows before it removes the jobs from Redis: a purge killed
between the two steps leaves final rows, whose jobs a worker sets aside without running
them, and nothing purged comes back after a reconcile."""

from __future__ import annotations

from typing import Any

import pytest

from django_delayq import purge_queue
from django_delayq.core import queues
from django_delayq.core.api import JobSpec, schedule_many
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine import Engine
from django_delayq.models import Job, JobStatus
from tests.helpers import burst, point_at

pytestmark = pytest.mark.django_db(transaction=True)

PURGED = {(JobStatus.CANCELLED, "purged from queue default")}


class Killed(RuntimeError):
    """The request running the purge dies between its two steps."""


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    return get_engine()


def test_rows_are_cancelled_before_any_job_leaves_redis(dq, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    ids = schedule_many("tests.jobs.record", [JobSpec(args=(str(out), "ran"), delay=i % 2)
                                              for i in range(450)])
    seen: list[set[tuple[str, str]]] = []

    def killed_before_redis(self: Engine, queue: str, limit: int = 200) -> list[str]:
        seen.append(set(Job.objects.filter(pk__in=ids).values_list("status", "last_error")))
        raise Killed("purge killed between its two steps")

    monkeypatch.setattr(Engine, "purge_pending", killed_before_redis)
    with pytest.raises(Killed):
        purge_queue("default")
    monkeypatch.undo()

    assert seen == [PURGED]  # every row final before the first job left Redis
    st = dq.stats("default")
    assert st.scheduled + st.ready == 450  # the jobs are still in Redis
    Reconciler(dq, get_settings(), ("default",)).run_all(assume_lost=True)
    rows: Any = Job.objects.filter(pk__in=ids)
    assert set(rows.values_list("status", "last_error")) == PURGED
    for job_id in ids:
        dq.reschedule("default", job_id, delay_ms=0)
    assert burst() == 0  # a worker claims them all and runs none: their rows are final
    assert not out.exists()
    Reconciler(dq, get_settings(), ("default",)).run_all(assume_lost=True)
    st = dq.stats("default")
    assert (st.scheduled, st.ready, st.inflight) == (0, 0, 0)
    assert set(rows.values_list("status", "last_error")) == PURGED
    assert purge_queue("default") == 0


def test_a_completed_purge_leaves_nothing_for_the_reconciler(dq) -> None:  # type: ignore[no-untyped-def]
    ids = schedule_many("tests.jobs.noop", [JobSpec(delay=60) for _ in range(250)])
    assert purge_queue("default") == 250
    Reconciler(dq, get_settings(), ("default",)).run_all(assume_lost=True)
    st = dq.stats("default")
    assert (st.scheduled, st.ready, st.inflight) == (0, 0, 0)
    assert set(Job.objects.filter(pk__in=ids).values_list("status", "last_error")) == PURGED


def test_no_claim_between_the_look_and_the_cancel(dq, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A worker claiming while the purge looks at what waits in Redis gets nothing (the
    queue is paused for the purge): no job runs with a row that says purged."""
    ids = schedule_many("tests.jobs.noop", [JobSpec() for _ in range(20)])
    look = queues._waiting_in_redis
    claims: list[list[str]] = []

    def look_then_a_worker_claims(engine: Engine, queue: str, batch: list[str]) -> list[str]:
        waiting = look(engine, queue, batch)
        claims.append([job.id for job in engine.claim(queue, 100, 60_000).jobs])
        return waiting

    monkeypatch.setattr(queues, "_waiting_in_redis", look_then_a_worker_claims)
    assert purge_queue("default") == 20
    assert claims == [[]]
    assert set(Job.objects.filter(pk__in=ids).values_list("status", "last_error")) == PURGED
    assert not dq.paused(["default"])  # resumed after the purge
    st = dq.stats("default")
    assert (st.scheduled, st.ready, st.inflight) == (0, 0, 0)


def test_a_paused_queue_stays_paused_after_a_purge(dq) -> None:  # type: ignore[no-untyped-def]
    schedule_many("tests.jobs.noop", [JobSpec() for _ in range(3)])
    dq.pause("default")
    assert purge_queue("default") == 3
    assert dq.paused(["default"]) == ["default"]


@pytest.mark.parametrize("purge", ["queue", "group"])
def test_a_job_in_flight_at_the_look_that_ends_meanwhile_keeps_its_row(  # type: ignore[no-untyped-def]
        dq, monkeypatch, purge) -> None:
    """A job claimed before the purge, its row still ``scheduled`` (a worker writes rows
    in batches), ends (its ack) while the purge reads Redis: the purge leaves its row
    alone, for the worker's audit to say it ran; only the waiting jobs are purged."""
    group = {"group": "g"} if purge == "group" else {}
    running = schedule_many("tests.jobs.noop", [JobSpec()], **group)[0]
    claimed = dq.claim("default", 1, 60_000).jobs
    assert [job.id for job in claimed] == [running]
    waiting = schedule_many("tests.jobs.noop", [JobSpec() for _ in range(3)], **group)
    presence = Engine.presence

    def read_then_the_job_ends(self: Engine, queue: str, job_ids: Any) -> Any:
        found = presence(self, queue, job_ids)
        self.ack(queue, [(job.id, job.token) for job in claimed])
        return found

    monkeypatch.setattr(Engine, "presence", read_then_the_job_ends)
    removed = queues.purge_queue("default") if purge == "queue" \
        else queues.purge_group("default", "g")
    monkeypatch.undo()
    assert removed == 3
    assert Job.objects.get(pk=running).status == JobStatus.SCHEDULED  # not said purged
    assert set(Job.objects.filter(pk__in=waiting).values_list("status", flat=True)) == {
        JobStatus.CANCELLED}
