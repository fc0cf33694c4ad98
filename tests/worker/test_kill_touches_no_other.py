"""A kill for one job touches no other: ``delayq_worker --processes 1 --concurrency 2``.

When a job must be stopped (cancelled while it runs, or past its hard time limit) and its
process still runs another job, the supervisor tells that process to stop claiming,
starts a replacement at once, and SIGKILLs the process only once the doomed job is the
last one it runs: the other job runs once, to its end, and is never started again. Each
run is recorded in the ``chaos_exec`` table (``tests/jobs_chaos.py``). The workers write
their audit rows once a second (``kill_settings.py``): a kill that came before the other
job's rows were written would lose them. A process that dies on its own charges its
running jobs an attempt each.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator

import pytest
from django.db import connection

from django_delayq import cancel, schedule
from django_delayq.models import JobStatus
from django_delayq.worker.tracking import EXIT_OK
from tests import jobs_chaos
from tests.helpers import ALLOWED, wait_until
from tests.worker import kill_settings
from tests.worker.conftest import worker_starter
from tests.worker.test_hard_time_limit import alive, children

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

JOB_TIMEOUT = "django_delayq.exceptions.JobTimeout"
LEASE_LOST = "django_delayq.exceptions.LeaseLost"
OTHER_S = 5.0  # how long the other job of the process runs


@pytest.fixture
def start(delayq_settings, tmp_path) -> Iterator[Callable[..., subprocess.Popen[str]]]:  # type: ignore[no-untyped-def]
    """Workers allowed to run tests.jobs_chaos, whose runs land in a clean chaos_exec."""
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "ALLOWED_CALLABLES": [*ALLOWED, kill_settings.JOBS]}
    jobs_chaos.create_table()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM chaos_exec")
    yield from worker_starter(delayq_settings, tmp_path, "tests.worker.kill_settings")


def pids(job_id: str) -> list[int]:
    """The process of each run of ``job_id``."""
    return [row[2] for row in jobs_chaos.executions(job_id)]


def both_running(proc: subprocess.Popen[str], *handles) -> int:  # type: ignore[no-untyped-def]
    """Wait until every job of ``handles`` runs its function; the one process they run in."""
    wait_until(lambda: all(len(pids(h.id)) == 1 for h in handles), timeout=60)
    (pid,) = {pids(h.id)[0] for h in handles}
    assert pid in children(proc.pid)
    return pid


def ran_once_and_succeeded(handle) -> None:  # type: ignore[no-untyped-def]
    wait_until(lambda: handle.status != JobStatus.RUNNING, timeout=30)  # its row lands
    row = handle.job
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 1)
    assert len(pids(handle.id)) == 1
    assert not row.attempt_history.exists()  # no failed attempt


def test_cancel_kills_its_process_only_after_the_other_job_finished(start) -> None:  # type: ignore[no-untyped-def]
    doomed_job = schedule("tests.jobs_chaos.sleep_record", 120, "a")
    other = schedule("tests.jobs_chaos.sleep_record", OTHER_S, "b", max_attempts=1)
    proc = start("--processes", "1", "--concurrency", "2")
    doomed = both_running(proc, doomed_job, other)
    cancel(doomed_job.id)
    # capacity is kept: a replacement starts while the doomed process runs on
    wait_until(lambda: len(children(proc.pid)) == 2, timeout=30)
    later = schedule("tests.jobs_chaos.record", "c")
    wait_until(lambda: doomed_job.status == JobStatus.CANCELLED, timeout=90)
    ran_once_and_succeeded(other)
    attempt = doomed_job.job.attempt_history.get()
    assert (attempt.number, attempt.outcome) == (1, JobStatus.CANCELLED)
    assert "cancelled while it ran" in attempt.error
    assert "did not run" not in doomed_job.job.last_error
    assert attempt.finished_at >= other.job.finished_at  # killed after the other ended
    assert pids(doomed_job.id) == [doomed]
    wait_until(lambda: not alive(doomed), timeout=30)
    wait_until(lambda: later.status == JobStatus.SUCCEEDED, timeout=60)
    assert pids(later.id) != [doomed]  # the replacement ran it: the doomed one drained
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == EXIT_OK


def test_failed_attempt_of_the_other_job_is_recorded_before_the_kill(start) -> None:  # type: ignore[no-untyped-def]
    doomed_job = schedule("tests.jobs_chaos.sleep_record", 120, "a")
    other = schedule("tests.worker.kill_jobs.sleep_then_raise", OTHER_S, "b", max_attempts=1)
    proc = start("--processes", "1", "--concurrency", "2")
    doomed = both_running(proc, doomed_job, other)
    cancel(doomed_job.id)
    wait_until(lambda: doomed_job.status == JobStatus.CANCELLED, timeout=90)
    wait_until(lambda: other.status == JobStatus.DEAD, timeout=30)
    failed = other.job.attempt_history.get()  # written by its own process, before the kill
    assert (failed.number, failed.outcome, failed.error_type) == (1, JobStatus.DEAD,
                                                                  "builtins.ValueError")
    assert failed.error == "b failed after %gs" % OTHER_S
    assert pids(other.id) == [doomed]
    cancelled = doomed_job.job.attempt_history.get()
    assert "cancelled while it ran" in cancelled.error
    assert cancelled.finished_at >= failed.finished_at
    gone_then_stop(proc, doomed)


def test_hard_limit_kills_its_process_only_after_the_other_job_finished(start) -> None:  # type: ignore[no-untyped-def]
    over = schedule("tests.jobs_chaos.sleep_record", 120, "a", timeout=1, max_attempts=1)
    other = schedule("tests.jobs_chaos.sleep_record", OTHER_S, "b", max_attempts=1)
    proc = start("--processes", "1", "--concurrency", "2")
    doomed = both_running(proc, over, other)
    wait_until(lambda: over.status == JobStatus.DEAD, timeout=90)
    ran_once_and_succeeded(other)
    attempt = over.job.attempt_history.get()
    assert (attempt.number, attempt.outcome, attempt.error_type) == (
        1, JobStatus.DEAD, JOB_TIMEOUT)
    assert "its process was killed" in attempt.error
    assert attempt.finished_at >= other.job.finished_at
    assert pids(over.id) == [doomed]
    gone_then_stop(proc, doomed)


def test_doomed_job_that_ends_first_is_not_killed(start) -> None:  # type: ignore[no-untyped-def]
    over = schedule("tests.jobs_chaos.sleep_record", 2.5, "a", timeout=1, max_attempts=1)
    other = schedule("tests.jobs_chaos.sleep_record", OTHER_S, "b", max_attempts=1)
    proc = start("--processes", "1", "--concurrency", "2")
    doomed = both_running(proc, over, other)
    wait_until(lambda: other.status == JobStatus.SUCCEEDED, timeout=90)
    ran_once_and_succeeded(other)
    # past its limit, it returned before it was the last job of its process: never
    # killed, its outcome stands; the process drained and exited
    ran_once_and_succeeded(over)
    gone_then_stop(proc, doomed)


def test_process_that_dies_on_its_own_charges_each_running_job(start) -> None:  # type: ignore[no-untyped-def]
    once = schedule("tests.jobs_chaos.sleep_record", 120, "once", max_attempts=1)
    twice = schedule("tests.jobs_chaos.sleep_record", 1, "twice", max_attempts=2,
                     backoff=[0])
    proc = start("--processes", "1", "--concurrency", "2")
    victim = both_running(proc, once, twice)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: once.status == JobStatus.DEAD, timeout=60)
    wait_until(lambda: twice.status == JobStatus.SUCCEEDED, timeout=60)
    lost = once.job.attempt_history.get()
    assert (lost.number, lost.outcome, lost.error_type) == (1, JobStatus.DEAD, LEASE_LOST)
    assert "killed by SIGKILL" in lost.error
    first = twice.job.attempt_history.get()
    assert (first.number, first.outcome, first.error_type) == (
        1, JobStatus.RETRYING, LEASE_LOST)
    assert twice.job.attempts == 2 and len(pids(twice.id)) == 2
    assert pids(once.id) == [victim]  # not run again: out of attempts
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == EXIT_OK


def gone_then_stop(proc: subprocess.Popen[str], doomed: int) -> None:
    """The doomed process ends; the supervisor then stops cleanly on SIGTERM."""
    wait_until(lambda: not alive(doomed), timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == EXIT_OK


def test_an_attempt_claimed_before_the_last_ones_report_still_meets_its_limit(  # type: ignore[no-untyped-def]
        start) -> None:
    """A job retried at once is claimed again (its claim reported at once) before the
    report of its last attempt, which a slow ``job_retrying`` receiver holds back, and
    starts late, behind another job: the supervisor still tracks the new attempt, kills
    it at its time limit and records it timed out."""
    handle = schedule(kill_settings.JOBS + ".retry_at_once_then_hang", "r", timeout=3,
                      max_attempts=2)
    schedule(kill_settings.JOBS + ".sleep", 4.0, "other", delay=0.5)
    start("--processes", "1", "--concurrency", "1")
    wait_until(lambda: handle.job.attempt_history.filter(number=2).exists(), timeout=60)
    second = handle.job.attempt_history.get(number=2)
    assert second.error_type == JOB_TIMEOUT, (second.error_type, second.error)
    assert len(pids(handle.id)) == 2  # once per attempt
