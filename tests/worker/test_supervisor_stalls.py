"""Stalls that must not cost a supervised child its jobs, at the default 6 s lease.

* A Redis stall shorter than the lease delays the heartbeat's lease extends but not the
  child's beats to its supervisor (a thread of their own): no child is killed, no job
  fails.
* A supervisor that stops reading its children's reports (stopped here; in life slow in
  the database) blocks only the link's sender thread: the heartbeat thread keeps
  extending the leases, so no other worker takes a running job over while it runs.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import redis

from django_delayq import JobSpec, schedule, schedule_many
from django_delayq.models import JobStatus
from tests.helpers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LEASE_S = 6  # the default


@pytest.fixture
def lease(delayq_settings) -> int:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "LEASE_SECONDS": LEASE_S}
    return LEASE_S


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_a_redis_stall_below_the_lease_kills_no_child(  # type: ignore[no-untyped-def]
        lease, delayq_settings, start_worker, tmp_path) -> None:
    out = tmp_path / "runs.txt"
    handle = schedule("tests.jobs.sleep_alone", str(out), 12.0, max_attempts=1)
    proc = start_worker("--processes", "1", "--concurrency", "2")
    try:
        wait_until(lambda: "start-alone" in _text(out), timeout=90)
        client = redis.Redis.from_url(delayq_settings.DELAYQ["REDIS_URL"])
        client.execute_command("CLIENT", "PAUSE", "4200", "ALL")  # 4.2 s: under the lease
        wait_until(lambda: handle.status in (JobStatus.SUCCEEDED, JobStatus.DEAD),
                   timeout=120)
        assert handle.status == JobStatus.SUCCEEDED, handle.job.last_error
        assert _text(out).count("start-") == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    log = (tmp_path / "worker-0.log").read_text() if (tmp_path / "worker-0.log").exists() else ""
    assert "heartbeat has been silent" not in log


def test_a_stalled_supervisor_stops_no_lease_extend(  # type: ignore[no-untyped-def]
        lease, start_worker, tmp_path) -> None:
    out = tmp_path / "runs.txt"
    handle = schedule("tests.jobs.sleep_alone", str(out), 2 * LEASE_S + 4.0, max_attempts=3)
    # Short jobs that keep the child reporting, so its socket to the stopped supervisor fills.
    schedule_many("tests.jobs.noop", [JobSpec(args=(i,)) for i in range(20000)])
    supervisor = start_worker("--processes", "1", "--concurrency", "4")
    other = None
    try:
        wait_until(lambda: "start-alone" in _text(out), timeout=90)
        os.kill(supervisor.pid, signal.SIGSTOP)
        other = start_worker("--concurrency", "2")  # would take over a lapsed lease
        # Stopped for over two leases: its child's leases must stay extended all along.
        wait_until(lambda: "end" in _text(out), timeout=120)
        assert "start-overlap" not in _text(out)
        assert _text(out).count("start-") == 1
    finally:
        os.kill(supervisor.pid, signal.SIGCONT)
        for proc in (supervisor, other):
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
        for proc in (supervisor, other):
            if proc is not None:
                proc.wait(120)
    wait_until(lambda: handle.status == JobStatus.SUCCEEDED, timeout=60)
