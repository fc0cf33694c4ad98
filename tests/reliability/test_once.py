"""Once means once: a stall of the database or of Redis, or a restart under the same
worker id, runs no finished job again.

Real ``delayq_worker`` subprocesses, the test database, a private redis-server; each job
appends its completed run to a file (``jobs_chaos.mark_run``), which neither stall
touches. The leases are short (1.5 s) so that each stall outlasts several of them.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from django_delayq import JobSpec, schedule_many
from django_delayq.models import LIVE_STATUSES, Job
from tests import jobs_chaos
from tests.helpers import point_at, wait_until
from tests.reliability.conftest import kill, stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LEASE = 1.5
FAST = {"LEASE_SECONDS": LEASE, "RECOVER_INTERVAL_SECONDS": 0.2,
        "RECONCILE_INTERVAL_SECONDS": 0.5, "RECONCILE_GRACE_SECONDS": 1}
JOBS = 120


@pytest.fixture
def runs_dir(tmp_path) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "runs"
    path.mkdir()
    return str(path)


def _schedule(runs_dir: str, n: int = JOBS, seconds: float = 0.05) -> set[str]:
    return set(schedule_many("tests.jobs_chaos.mark_run",
                             [JobSpec(args=(runs_dir, seconds)) for _ in range(n)]))


def _all_final(timeout: float = 120) -> None:
    wait_until(lambda: not Job.objects.filter(status__in=LIVE_STATUSES).exists(),
               timeout=timeout, step=0.2)


def _twice(runs_dir: str, ids: set[str]) -> dict[str, list[int]]:
    ran = jobs_chaos.marked_runs(runs_dir)
    assert set(ran) == ids, "lost: %s" % sorted(ids - set(ran))[:5]
    return {job_id: attempts for job_id, attempts in ran.items() if len(attempts) > 1}


def _ran_once(workers: list[Any], runs_dir: str, ids: set[str]) -> None:
    """After the fault: every row final, the workers stopped cleanly, each job ran once."""
    _all_final()
    for proc in workers:
        stop(proc)
    twice = _twice(runs_dir, ids)
    assert not twice, "%d job(s) completed twice after the stall: %s" % (
        len(twice), list(twice.items())[:5])


def _count(runs_dir: str) -> int:
    return sum(len(a) for a in jobs_chaos.marked_runs(runs_dir).values())


class DatabaseStall:
    """Holds the job table locked for ``seconds`` from a connection of its own (every
    worker's reads and writes of it wait, as behind a stalled database)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.holding = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def __enter__(self) -> DatabaseStall:
        self.thread.start()
        assert self.holding.wait(30), "could not lock the job table"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.thread.join(self.seconds + 30)

    def _hold(self) -> None:
        from django.db import connections

        conn = connections.create_connection("default")
        try:
            with conn.cursor() as cursor:
                if conn.vendor == "sqlite":
                    cursor.execute("BEGIN EXCLUSIVE")
                else:
                    cursor.execute("BEGIN")
                    cursor.execute("LOCK TABLE %s IN ACCESS EXCLUSIVE MODE"
                                   % Job._meta.db_table)
                self.holding.set()
                time.sleep(self.seconds)  # the stall itself: a fixed span is the fault
                cursor.execute("ROLLBACK")
        finally:
            conn.close()


def test_a_database_stall_longer_than_the_lease_runs_nothing_twice(  # type: ignore[no-untyped-def]
        cfg, start_with, runs_dir) -> None:
    ids = _schedule(runs_dir)
    workers = [start_with(FAST, "--concurrency", "4") for _ in range(2)]
    wait_until(lambda: _count(runs_dir) >= 20, timeout=60, step=0.05)
    with DatabaseStall(4 * LEASE):
        pass
    _ran_once(workers, runs_dir, ids)


def test_a_redis_stall_longer_than_the_lease_runs_nothing_twice(  # type: ignore[no-untyped-def]
        cfg, start_with, runs_dir, volatile_server) -> None:
    point_at(cfg, volatile_server)  # a server of this test's own, to stop
    ids = _schedule(runs_dir, seconds=0.1)
    workers = [start_with(FAST, "--concurrency", "4") for _ in range(2)]
    wait_until(lambda: _count(runs_dir) >= 20, timeout=60, step=0.05)
    os.kill(volatile_server.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(4 * LEASE)  # the stall itself: a fixed span is the fault
    finally:
        os.kill(volatile_server.proc.pid, signal.SIGCONT)
    _ran_once(workers, runs_dir, ids)


def test_a_restart_under_the_same_worker_id_adopts_nothing(  # type: ignore[no-untyped-def]
        cfg, start_with, runs_dir) -> None:
    """SIGKILL a worker with a fixed --worker-id, start it again under that id: every row
    ends final, and no lease token runs twice (a re-run is a new attempt)."""
    ids = _schedule(runs_dir, n=40, seconds=0.3)
    first = start_with(FAST, "--worker-id", "fixed", "--concurrency", "4")
    wait_until(lambda: _count(runs_dir) >= 8, timeout=60, step=0.02)
    kill(first)
    second = start_with(FAST, "--worker-id", "fixed", "--concurrency", "4")
    _all_final(timeout=90)
    stop(second)
    ran = jobs_chaos.marked_runs(runs_dir)
    assert set(ran) == ids
    reused = {job_id: a for job_id, a in ran.items() if len(a) != len(set(a))}
    assert not reused, "lease tokens used twice: %s" % list(reused.items())[:5]
    for row in Job.objects.filter(pk__in=ids):
        assert row.attempts >= len(ran[row.pk]), (row.pk, row.attempts, ran[row.pk])
