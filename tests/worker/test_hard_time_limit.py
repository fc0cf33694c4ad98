"""Hard time limits under ``delayq_worker --processes``: real processes, real signals.

A job still running past its time limit gets its worker process SIGKILLed by the
supervisor; the attempt is recorded as timed out (``JobTimeout``), the process's other
jobs are never cut short nor run again for it (the kill waits for them: see
test_kill_touches_no_other.py), a new process takes its place, and no process is left
behind at shutdown.
"""

from __future__ import annotations

import signal

import psutil
import pytest

from django_delayq import cancel, schedule
from django_delayq.models import JobStatus
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

JOB_TIMEOUT = "django_delayq.exceptions.JobTimeout"


def children(pid: int) -> set[int]:
    """The live worker processes of supervisor ``pid``."""
    try:
        return {p.pid for p in psutil.Process(pid).children() if alive(p.pid)}
    except psutil.NoSuchProcess:
        return set()


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie waiting for its parent to read its exit is not running)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def runs(path) -> list[str]:  # type: ignore[no-untyped-def]
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def test_job_past_its_limit_is_killed_recorded_as_timed_out_and_the_rest_run_once(
        start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    stuck = schedule("tests.jobs.sleep_then_record", str(out), "stuck", 3600, timeout=2,
                     max_attempts=1)
    proc = start_worker("--processes", "2", "--concurrency", "2")
    wait_until(lambda: len(children(proc.pid)) == 2, timeout=30)
    seen = set(children(proc.pid))
    wait_until(lambda: stuck.status == JobStatus.RUNNING, timeout=30)
    others = [schedule("tests.jobs.record", str(out), "o%d" % i) for i in range(20)]
    wait_until(lambda: stuck.status == JobStatus.DEAD, timeout=30)
    attempt = stuck.job.attempt_history.get()
    assert (attempt.outcome, attempt.error_type) == (JobStatus.DEAD, JOB_TIMEOUT)
    assert "time limit; its process was killed" in attempt.error
    wait_until(lambda: all(h.status == JobStatus.SUCCEEDED for h in others), timeout=60)
    assert sorted(runs(out)) == sorted("o%d" % i for i in range(20))  # once each
    assert all(h.job.attempts == 1 for h in others)  # none charged for the kill
    assert not any(h.job.attempt_history.exists() for h in others)
    wait_until(lambda: len(children(proc.pid)) == 2, timeout=30)  # a replacement started
    seen |= children(proc.pid)
    assert len(seen) == 3
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK
    wait_until(lambda: not any(alive(pid) for pid in seen), timeout=10)


def test_timed_out_attempt_is_retried_by_its_policy(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.sleep_then_record", str(out), "slow", 3600, timeout=1.5,
                 backoff=[0.2])  # two attempts, the second 0.2 s after the first
    proc = start_worker("--processes", "1", "--concurrency", "1")
    wait_until(lambda: h.status == JobStatus.DEAD, timeout=60)
    attempts = list(h.job.attempt_history.order_by("number"))
    assert [(a.number, a.outcome, a.error_type) for a in attempts] == [
        (1, JobStatus.RETRYING, JOB_TIMEOUT), (2, JobStatus.DEAD, JOB_TIMEOUT)]
    assert runs(out) == []
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK


def test_running_job_cancelled_is_killed_and_ends_cancelled(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.sleep_then_record", str(out), "long", 3600)
    proc = start_worker("--processes", "1", "--concurrency", "2")
    wait_until(lambda: h.status == JobStatus.RUNNING, timeout=30)
    before = children(proc.pid)
    cancel(h.id)
    wait_until(lambda: h.status == JobStatus.CANCELLED, timeout=30)
    attempt = h.job.attempt_history.get()
    assert (attempt.number, attempt.outcome) == (1, JobStatus.CANCELLED)
    assert attempt.error == h.job.last_error == "cancelled while it ran: its process was killed"
    wait_until(lambda: len(children(proc.pid)) == 1 and children(proc.pid) != before,
               timeout=30)
    after = schedule("tests.jobs.record", str(out), "after")
    wait_until(lambda: after.status == JobStatus.SUCCEEDED, timeout=30)
    assert runs(out) == ["after"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK


def test_a_job_holding_the_gil_from_its_first_line_still_meets_its_limit(  # type: ignore[no-untyped-def]
        start_worker) -> None:
    stuck = schedule("tests.jobs.hold_the_gil", timeout=2, max_attempts=1)
    proc = start_worker("--processes", "1", "--concurrency", "2")
    wait_until(lambda: stuck.status == JobStatus.DEAD, timeout=60)
    attempt = stuck.job.attempt_history.get()
    assert (attempt.outcome, attempt.error_type) == (JobStatus.DEAD, JOB_TIMEOUT)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK
