"""Fast recovery: with the default lease, a SIGKILLed worker's jobs run again on a live
worker within seconds, not after a minute; a slow worker that lost its lease cannot
settle the copy that runs elsewhere (fencing tokens, see test_lease.py). And a busy
worker does not hold a job of higher priority behind the backlog it has prefetched."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from django_delayq import schedule
from django_delayq.core.conf import DEFAULTS, get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from tests import jobs_chaos
from tests.helpers import point_at, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

# The lease used before: a killed worker's jobs waited it out. Re-runs must come well
# before it (generous bound: busy CI machines).
OLD_LEASE_SECONDS = 60.0
BOUND_SECONDS = 25.0


@pytest.fixture
def cfg(settings, redis_server, exec_table):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    settings.DELAYQ = {**settings.DELAYQ, "LEASE_SECONDS": DEFAULTS["LEASE_SECONDS"]}
    return settings


def _pids(job_id: str) -> list[int]:
    return [e[2] for e in jobs_chaos.executions(job_id)]


def test_default_lease_is_short_and_renewed_by_the_heartbeat() -> None:
    assert DEFAULTS["LEASE_SECONDS"] <= 10  # a killed worker's jobs wait at most this long


def test_killed_workers_jobs_run_again_on_a_live_worker_within_seconds(cfg, start_worker) -> None:  # type: ignore[no-untyped-def]
    victim = start_worker("--concurrency", "2")
    handles = [schedule("tests.jobs_chaos.sleep_record", 120, "long-%d" % i) for i in range(2)]
    wait_until(lambda: all(_pids(h.id) == [victim.pid] for h in handles), timeout=30)
    survivor = start_worker("--concurrency", "2")
    wait_until(lambda: any(h.job.status == JobStatus.RUNNING for h in handles), timeout=30)
    victim.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    victim.wait()
    wait_until(lambda: all(_pids(h.id) == [victim.pid, survivor.pid] for h in handles),
               timeout=OLD_LEASE_SECONDS + 30)
    elapsed = time.monotonic() - killed_at
    assert elapsed < BOUND_SECONDS, "re-run %.1f s after the kill" % elapsed
    for h in handles:  # the lost attempt is recorded; the re-run is attempt 2
        assert [e[1] for e in jobs_chaos.executions(h.id)] == [1, 2]
        wait_until(lambda h=h: (h.job.status, h.job.attempts) == (JobStatus.RUNNING, 2),
                   timeout=30)


def test_long_job_keeps_its_short_lease_while_a_peer_recovers_eagerly(cfg, start_worker) -> None:  # type: ignore[no-untyped-def]
    """A job running for two default leases is heartbeated: no live peer takes it."""
    h = schedule("tests.jobs_chaos.sleep_record", 2.2 * DEFAULTS["LEASE_SECONDS"], "long")
    first = start_worker("--concurrency", "1")
    wait_until(lambda: _pids(h.id) == [first.pid], timeout=30)
    start_worker("--concurrency", "1")  # recovers every 0.2 s (worker_settings)
    wait_until(lambda: h.status == JobStatus.SUCCEEDED, timeout=60)
    assert _pids(h.id) == [first.pid]
    assert h.job.attempts == 1


def test_busy_worker_starts_a_high_priority_job_ahead_of_its_prefetched_backlog(cfg) -> None:  # type: ignore[no-untyped-def]
    """One thread, a backlog of 300 short jobs (the worker holds up to CLAIM_BATCH of them
    claimed and waiting): a job of priority 50 scheduled meanwhile starts within a few jobs,
    not after the ones already claimed."""
    backlog = [schedule("tests.jobs_chaos.sleep_record", 0.02, "backlog") for _ in range(300)]
    worker = Worker(get_engine(), get_settings(), WorkerOptions(
        queues=("default",), concurrency=1, prefetch=100))  # a prefetch fixed by hand
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(jobs_chaos.executions()) >= 5, timeout=30)
        assert worker.ledger.capacity_used() > 20  # a prefetched backlog is waiting
        ran_before = len(jobs_chaos.executions())
        urgent = schedule("tests.jobs_chaos.record", "urgent", priority=50)
        wait_until(lambda: _pids(urgent.id), timeout=30)
    finally:
        worker.request_stop()
        worker.request_stop()
        thread.join(10)
    tags = [e[4] for e in jobs_chaos.executions()]
    assert tags.index("urgent") - ran_before < 10, tags.index("urgent") - ran_before
    assert len(backlog) - tags.count("backlog") > 100  # most of the backlog was still to run
