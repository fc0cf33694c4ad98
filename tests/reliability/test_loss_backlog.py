"""A Redis that restarts empty while its workers stay alive charges no attempt that never
ran: every worker active before the loss (the registry each reconciler read just before
it, ``core/loss_witness.py``) heard from again after it ran none of the backlog's jobs
unrecorded. A worker that died with a run in the lost data still has that run counted.

Real worker subprocesses and a real redis-server without persistence, restarted empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from django_delayq import JobSpec, schedule, schedule_many
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile_state import UNRECORDED
from django_delayq.models import Job, JobAttempt, JobStatus
from tests import jobs_chaos
from tests.helpers import point_at, wait_until
from tests.reliability.conftest import kill, stop
from tests.reliability.test_once import _all_final
from tests.reliability.test_once import runs_dir as runs_dir  # the fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

# heartbeats every second, leases taken back fast
FAST = {"LEASE_SECONDS": 3.0, "RECOVER_INTERVAL_SECONDS": 0.2,
        "RECONCILE_INTERVAL_SECONDS": 0.5, "RECONCILE_GRACE_SECONDS": 1}


def _registered() -> set[str]:
    return {w for w, _ in get_engine().beats_since(0)}


def _beaten_since(at_ms: int) -> None:
    """Wait until every registered worker has heartbeated at or after ``at_ms``."""
    wait_until(lambda: all(b >= at_ms for _, b in get_engine().beats_since(0)), timeout=60,
               step=0.05)


def test_a_backlog_lost_with_redis_is_not_charged_while_its_workers_live(  # type: ignore[no-untyped-def]
        cfg, start_with, runs_dir, volatile_server) -> None:
    point_at(cfg, volatile_server, **FAST)
    procs = [start_with(FAST, "--concurrency", "4") for _ in range(2)]
    wait_until(lambda: len(_registered()) == 2, timeout=60, step=0.05)
    get_engine().pause("default")  # a backlog: due, not claimed (the pause goes with the data)
    ids = set(schedule_many("tests.jobs_chaos.fail_first", [JobSpec(args=(runs_dir,))
                                                            for _ in range(100)],
                            max_attempts=2, backoff=0.1))
    _beaten_since(get_engine().time_ms() + 2000)  # their reconcilers looked meanwhile
    volatile_server.restart()  # every key gone; the workers stay alive
    _all_final(timeout=120)
    for proc in procs:
        stop(proc)
    charged = JobAttempt.objects.filter(error=UNRECORDED).count()
    assert charged == 0, "%d attempt row(s) of runs that never happened" % charged
    ran = jobs_chaos.marked_runs(runs_dir)
    assert set(ran) == ids
    wrong = {job_id: attempts for job_id, attempts in ran.items() if attempts != [1, 2]}
    assert not wrong, (len(wrong), list(wrong.items())[:5])
    final = Job.objects.filter(pk__in=ids)
    assert set(final.values_list("status", "attempts")) == {(JobStatus.SUCCEEDED, 2)}


def test_a_run_in_the_lost_data_by_a_worker_that_died_is_an_attempt(  # type: ignore[no-untyped-def]
        cfg, start_with, runs_dir, volatile_server) -> None:
    """The worker running it is SIGKILLed before its audit flush (one every 30 s here):
    its row still says ``scheduled``; Redis then restarts empty. The other worker, alive
    throughout, saw the runner in the registry before the loss and silent after it."""
    point_at(cfg, volatile_server, **FAST)
    runner = start_with({**FAST, "AUDIT_FLUSH_SECONDS": 30.0}, "--concurrency", "2")
    wait_until(lambda: len(_registered()) == 1, timeout=60, step=0.05)
    h = schedule("tests.jobs_chaos.note_start_then_sleep", runs_dir, 600, max_attempts=3)
    started = Path(runs_dir) / "started"
    wait_until(started.exists, timeout=60, step=0.02)
    assert started.read_text().split() == [h.id, str(runner.pid)]
    other = start_with(FAST, "--concurrency", "2")
    wait_until(lambda: len(_registered()) == 2, timeout=60, step=0.05)
    assert Job.objects.get(pk=h.id).status == JobStatus.SCHEDULED  # its run unrecorded
    kill(runner)
    volatile_server.restart()
    wait_until(lambda: Job.objects.get(pk=h.id).status == JobStatus.SUCCEEDED, timeout=120)
    stop(other)
    assert jobs_chaos.marked_runs(runs_dir) == {h.id: [2]}  # the lost run: attempt 1
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list("number", "error")) == [
        (1, UNRECORDED)]
