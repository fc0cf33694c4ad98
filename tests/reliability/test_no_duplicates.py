"""A job runs twice only after a worker crash or a Redis data loss; every run is an attempt
in the audit; a row does not stay live once its job is final in Redis.

Real ``delayq_worker`` subprocesses, the test database, a private Redis. A worker that must
be killed between its Redis settlement and its audit flush gets ``AUDIT_FLUSH_SECONDS=5``
(its settings module reads extra ``DELAYQ`` keys from ``DELAYQ_TEST_EXTRA``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from django_delayq import job, schedule
from django_delayq.core import reconcile_state
from django_delayq.core.api import group
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile_state import DEAD_IN_REDIS
from django_delayq.models import LIVE_STATUSES, Job, JobAttempt, JobStatus
from tests import jobs_chaos
from tests.conftest import unique_prefix
from tests.helpers import wait_until
from tests.reliability.conftest import kill, stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

SLOW_FLUSH = {"AUDIT_FLUSH_SECONDS": 5}  # a kill lands between settlement and flush
# A flush slower than a re-claim: a job re-enqueued by mistake runs again before its
# row says it ran (the claim-time check of the row cannot stop it then).
SLOWER_FLUSH = {"AUDIT_FLUSH_SECONDS": 0.5}
FAST_RECONCILE = {"RECONCILE_GRACE_SECONDS": 1, "RECONCILE_INTERVAL_SECONDS": 0.5}
# A reconciler settles the row of a killed worker once that worker was silent for two
# leases: 3 s with this lease, not the 20 s of the tests' default.
SHORT_LEASE = {"LEASE_SECONDS": 1.5}


def busy_loops(n: int = 2) -> list[subprocess.Popen[bytes]]:
    """CPU hogs: a loaded host stretches every window between Redis and the audit. At the
    lowest priority: alone they load the host, beside other tests they take what is left
    (the rest of the suite is load enough) instead of slowing it down."""
    return [subprocess.Popen([sys.executable, "-c", "import os\nos.nice(19)\nwhile True: pass"])
            for _ in range(n)]


ROUNDS = 3
JOBS = 3000


def test_first_worker_on_a_redis_without_epoch_runs_every_job_once(cfg, start_with) -> None:  # type: ignore[no-untyped-def]
    """A new deploy: a web process schedules jobs one by one into a Redis that no worker
    has seen (no epoch key), then the first worker starts, on a loaded host, with an
    audit flush slower than a claim. Each round a new prefix (a new Redis for the queue).
    The job records its runs in Redis (cheap: the worker drains as fast as it can while
    its reconciler takes its first look)."""
    hogs = busy_loops()
    twice: dict[str, list[int]] = {}
    try:
        for _ in range(ROUNDS):
            prefix = unique_prefix()
            cfg.DELAYQ = {**cfg.DELAYQ, "PREFIX": prefix}
            engine = get_engine()
            assert not engine.client.exists(engine.keys("default").tag + ":epoch")
            ids = {schedule("tests.jobs_chaos.record_in_redis", delay=1).id
                   for _ in range(JOBS)}
            proc = start_with(SLOWER_FLUSH)
            wait_until(lambda: not Job.objects.filter(status__in=LIVE_STATUSES).exists(),
                       timeout=180, step=0.2)
            wait_until(lambda e=engine: (s := e.stats("default")).scheduled + s.ready
                       + s.inflight == 0, timeout=60, step=0.2)  # nothing re-enqueued left
            stop(proc)
            ran = jobs_chaos.runs(prefix)
            assert set(ran) == ids
            twice.update({job_id: runs for job_id, runs in ran.items() if len(runs) > 1})
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert not twice, "%d job(s) ran more than once, e.g. %s" % (len(twice),
                                                                 list(twice.items())[:5])
    assert Job.objects.exclude(status=JobStatus.SUCCEEDED).count() == 0
    assert Job.objects.exclude(attempts=1).count() == 0


def test_row_of_a_job_dead_in_redis_is_settled_dead_after_its_worker_is_killed(  # type: ignore[no-untyped-def]
        cfg, start_with) -> None:
    """The final nack reached Redis (the id is in the dead set); the worker was SIGKILLed
    before its audit flush. Another worker's reconciler settles the row dead."""
    engine = get_engine()
    h = schedule("tests.jobs_chaos.always_raises", "boom", max_attempts=1)
    first = start_with(SLOW_FLUSH)
    wait_until(lambda: engine.client.zscore(engine.keys("default").dead, h.id) is not None,
               timeout=30, step=0.005)
    kill(first)
    assert (h.job.status, h.job.attempts) == (JobStatus.SCHEDULED, 0)  # never flushed
    second = start_with(FAST_RECONCILE)
    wait_until(lambda: h.status == JobStatus.DEAD, timeout=30)
    stop(second)
    row = h.job
    assert (row.attempts, row.last_error) == (1, DEAD_IN_REDIS)
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list(
        "number", "outcome", "error")) == [(1, "dead", DEAD_IN_REDIS)]
    assert len(jobs_chaos.executions(h.id)) == 1  # settled, not run again
    assert engine.inspect("default", h.id).place == "dead"


def test_a_run_its_worker_never_recorded_is_settled_from_redis_not_run_again(  # type: ignore[no-untyped-def]
        cfg, start_with) -> None:
    """The job ran and was acked; its worker was SIGKILLed before its first audit write
    (the row still says scheduled, 0 attempts). Redis kept how the ack ended it (the
    settled record): the reconciler settles the row from it, and the job is not run
    again."""
    engine = get_engine()
    h = schedule("tests.jobs_chaos.record", "unrecorded")
    first = start_with({**SLOW_FLUSH, **SHORT_LEASE})
    wait_until(lambda: bool(jobs_chaos.executions(h.id))
               and engine.inspect("default", h.id).place == "", timeout=30, step=0.005)
    kill(first)
    assert (h.job.status, h.job.attempts) == (JobStatus.SCHEDULED, 0)  # never flushed
    second = start_with({**FAST_RECONCILE, **SHORT_LEASE})
    wait_until(lambda: h.status == JobStatus.SUCCEEDED, timeout=30)
    stop(second)
    assert [e[1] for e in jobs_chaos.executions(h.id)] == [1]  # ran once, under token 1
    row = h.job
    assert row.attempts == 1 and row.last_error == reconcile_state.SUCCEEDED_IN_REDIS
    assert engine.presence("default", [h.id])[0].settled is None  # the record is gone


def test_a_killed_workers_running_row_ends_from_redis_without_the_grace(  # type: ignore[no-untyped-def]
        cfg, start_with, tmp_path) -> None:
    """The row said ``running`` (its start flushed), the job then finished and was acked;
    its worker was SIGKILLed before the flush of its end. Another worker's reconciler,
    with the default 60 s grace, settles the row from the settled record once the dead
    worker was silent for two leases (3 s here), and the job is not run again."""
    engine = get_engine()
    gate = tmp_path / "gate"
    h = schedule("tests.jobs.report_then_wait", "ran", str(gate))
    first = start_with({**SLOW_FLUSH, **SHORT_LEASE})
    wait_until(lambda: h.status == JobStatus.RUNNING, timeout=30)  # the first flush
    gate.touch()
    wait_until(lambda: (p := engine.presence("default", [h.id])[0]).settled is not None
               and not p.queued, timeout=30, step=0.005)
    kill(first)  # well before its next flush, 5 s after the one that wrote running
    assert h.status == JobStatus.RUNNING
    second = start_with(SHORT_LEASE)
    wait_until(lambda: h.status == JobStatus.SUCCEEDED, timeout=30)
    stop(second)
    assert h.job.last_error == reconcile_state.SUCCEEDED_IN_REDIS
    assert engine.inspect("default", h.id).place == ""  # not put back to run again



@pytest.mark.parametrize("processes", [False, True], ids=["worker", "child"])
def test_a_killed_workers_unrecorded_runs_end_within_seconds_and_their_summary_follows(  # type: ignore[no-untyped-def]
        cfg, start_with, processes) -> None:
    """Members of a group ran and were acked; their worker (a plain one, or the children
    of a ``--processes 2`` worker that ran them) was SIGKILLed before its first audit
    write: their rows still say scheduled. With a grace of 300 s, another worker's
    reconciler settles them from their settled records once the dead worker was silent
    for two leases (3 s here), not after the grace, and the group's summary runs then.
    (The killed worker's flush is slow, and so would be its second look:
    ``20 * AUDIT_FLUSH_SECONDS``.)"""
    engine = get_engine()
    rec = job("tests.jobs_chaos.record")
    res = group([rec.s("m%d" % i) for i in range(8)], then=rec.s("summary"))
    assert res.then is not None
    first = start_with({**SLOW_FLUSH, **SHORT_LEASE, "RECONCILE_GRACE_SECONDS": 300},
                       *(("--processes", "2", "--concurrency", "2") if processes else ()))
    wait_until(lambda: all(jobs_chaos.executions(pk) for pk in res.ids) and not any(
        p.queued or p.settled is None for p in engine.presence("default", res.ids)),
        timeout=60, step=0.005)
    if processes:  # the children that ran them; the supervisor starts others
        for pid in {e[2] for pk in res.ids for e in jobs_chaos.executions(pk)} - {first.pid}:
            os.kill(pid, signal.SIGKILL)
    else:
        kill(first)
    killed_at = time.monotonic()
    assert set(Job.objects.filter(pk__in=res.ids).values_list("status", flat=True)) == {
        JobStatus.SCHEDULED}  # never flushed
    second = start_with({"RECONCILE_GRACE_SECONDS": 300, **SHORT_LEASE})
    wait_until(lambda: Job.objects.filter(pk__in=res.ids, status=JobStatus.SUCCEEDED).count()
               == 8, timeout=120)
    elapsed = time.monotonic() - killed_at
    wait_until(lambda: bool(jobs_chaos.executions(res.then.id)), timeout=60)  # type: ignore[union-attr]
    stop(second)
    if processes:
        stop(first)
    assert elapsed < 30, "settled %.1f s after the kill" % elapsed  # the grace: 300 s
    assert all(len(jobs_chaos.executions(pk)) == 1 for pk in res.ids)  # not run again
    assert set(Job.objects.filter(pk__in=res.ids).values_list("last_error", flat=True)) == {
        reconcile_state.SUCCEEDED_IN_REDIS}
