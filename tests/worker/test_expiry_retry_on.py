"""Expiry, retry_on and per-job soft time limits with a real worker (helpers.burst)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from django_delayq import JobHandle, MoveOutcome, run_now, schedule
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import burst, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

JOB_TIMEOUT = "django_delayq.exceptions.JobTimeout"


def tags(path: Path) -> list[str]:
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def test_a_job_claimed_after_it_expired_never_runs(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    gone = schedule("tests.jobs.record", str(out), "gone", expires=0.2)
    kept = schedule("tests.jobs.record", str(out), "kept", expires=timedelta(hours=1))
    expires_at = gone.job.expires_at
    assert expires_at is not None
    wait_until(lambda: datetime.now(UTC) > expires_at + timedelta(milliseconds=50), timeout=5)
    assert burst() == EXIT_OK
    assert tags(out) == ["kept"] and kept.status == JobStatus.SUCCEEDED
    row = gone.job
    assert row.status == JobStatus.EXPIRED and row.is_final
    assert row.last_error.startswith("expired at %s" % expires_at.isoformat()[:19])
    assert (row.attempts, row.started_at, row.error_type) == (0, None, "")
    assert not JobAttempt.objects.filter(job_id=gone.id).exists()  # it never ran
    assert get_engine().inspect("default", gone.id).place == ""  # gone from Redis


def claim_its_retry_expired(handle: JobHandle) -> datetime:
    """``handle``'s row (retrying) given an expiry a second ago (whole ms, as stored), its
    retry made due and claimed by a burst worker; returns that expiry."""
    now = datetime.now(UTC)
    past = now.replace(microsecond=now.microsecond // 1000 * 1000) - timedelta(seconds=1)
    Job.objects.filter(pk=handle.id).update(expires_at=past)  # its expiry passed
    assert run_now(handle.id) == MoveOutcome.MOVED  # its retry is due
    assert burst() == EXIT_OK
    return past


def test_a_retry_not_started_before_the_expiry_says_it_ran_before(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """Its first attempt ran and failed; its retry is claimed after the row's expiry: the
    row ends ``expired`` with that one attempt, and its reason does not say "never run"."""
    handle = schedule("tests.jobs.boom", "kaput", backoff=[3600], expires=timedelta(hours=2))
    assert burst() == EXIT_OK
    assert (handle.job.status, handle.job.attempts) == (JobStatus.RETRYING, 1)
    past = claim_its_retry_expired(handle)
    row = handle.job
    assert (row.status, row.attempts) == (JobStatus.EXPIRED, 1)
    assert row.last_error == ("expired at %s: its retry (attempt 2) was not started by then; "
                              "attempt 1 ran" % past.isoformat(timespec="milliseconds"))
    assert list(JobAttempt.objects.filter(job_id=handle.id).values_list(
        "number", "outcome")) == [(1, "retrying")]


def test_retry_on_limits_which_exceptions_are_retried(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    later = [3600, 3600]
    unlisted = schedule("tests.jobs_more.raise_value_error", "unlisted", retry_on=[LookupError],
                        max_attempts=3, backoff=later)
    listed = schedule("tests.jobs_more.raise_value_error", "listed", retry_on=[ValueError],
                      max_attempts=3, backoff=later)
    base = schedule("tests.jobs_more.raise_value_error", "base",
                    retry_on=["builtins.Exception"], max_attempts=3, backoff=later)
    asked = schedule("tests.jobs.ask_retry", 3600, retry_on=[KeyError], max_attempts=3)
    assert burst() == EXIT_OK
    row = unlisted.job
    assert (row.status, row.attempts, row.error_type) == (JobStatus.DEAD, 1, "builtins.ValueError")
    assert row.last_error == "unlisted (not retried: builtins.ValueError is not in retry_on)"
    assert list(JobAttempt.objects.filter(job_id=unlisted.id).values_list(
        "number", "outcome")) == [(1, "dead")]  # the attempt is recorded
    assert get_engine().inspect("default", unlisted.id).place == "dead"
    assert listed.status == JobStatus.RETRYING  # its class is listed
    assert base.status == JobStatus.RETRYING  # a base class of it is listed
    assert asked.status == JobStatus.RETRYING  # Retry is the job asking: always honoured


def test_time_limits_per_job_and_queue_fail_the_attempt_but_cannot_stop_the_thread(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "JOB_TIMEOUT_SECONDS": None,
                              "QUEUE_OPTIONS": {"slow": {"timeout": 0.5}}}
    out = tmp_path / "runs.txt"
    run = "tests.jobs.sleep_then_record"
    own = schedule(run, str(out), "own", 4.0, timeout=0.5, max_attempts=1)
    free = schedule(run, str(out), "free", 1.5)  # no limit anywhere
    queued = schedule(run, str(out), "queued", 4.0, queue="slow", max_attempts=2,
                      backoff=[3600])
    longer = schedule(run, str(out), "longer", 1.5, queue="slow", timeout=30)
    assert burst(("default", "slow"), concurrency=4) == EXIT_OK
    row = own.job
    assert (row.status, row.attempts, row.error_type) == (JobStatus.DEAD, 1, JOB_TIMEOUT)
    assert "0.5s" in row.last_error
    assert row.finished_at is not None and row.started_at is not None
    assert (row.finished_at - row.started_at).total_seconds() < 3.5  # failed before it ended
    assert (queued.job.status, queued.job.error_type) == (JobStatus.RETRYING, JOB_TIMEOUT)
    assert free.status == JobStatus.SUCCEEDED  # no time limit
    assert longer.status == JobStatus.SUCCEEDED  # its own limit beats its queue's
    # soft: the functions were not stopped; what they returned was dropped
    wait_until(lambda: {"own", "queued"} <= set(tags(out)), timeout=20)
    assert own.status == JobStatus.DEAD and queued.status == JobStatus.RETRYING


def test_an_attempt_that_ends_past_its_time_limit_times_out_however_late_the_loop_looks(delayq_settings, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A main loop too busy to look (here: never) does not let an attempt that ran past its
    limit succeed: it ends timed out when it returns, in thread and atomic mode alike."""
    from django_delayq.worker.runner import Execution
    monkeypatch.setattr(Execution, "expire_overdue", lambda self: None)
    out = tmp_path / "runs.txt"
    run = "tests.jobs.sleep_then_record"
    plain = schedule(run, str(out), "plain", 0.6, timeout=0.2, max_attempts=1)
    in_time = schedule(run, str(out), "in-time", 0.0, timeout=30, max_attempts=1)
    assert burst() == EXIT_OK
    row = plain.job
    assert (row.status, row.attempts, row.error_type) == (JobStatus.DEAD, 1, JOB_TIMEOUT)
    assert "0.2s" in row.last_error
    assert list(JobAttempt.objects.filter(job_id=plain.id).values_list(
        "number", "error_type")) == [(1, JOB_TIMEOUT)]
    assert in_time.status == JobStatus.SUCCEEDED
    assert sorted(tags(out)) == ["in-time", "plain"]  # soft: the function ran to its end


def test_the_retry_of_a_timed_out_attempt_keeps_its_own_limit_while_the_first_runs_on(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Attempt 1 times out and its thread runs on; attempt 2 starts meanwhile in the same
    worker. Attempt 1's late end is dropped without touching attempt 2, which keeps its
    heartbeat and its own time limit: dead after two timed-out attempts, no lease lost."""
    out = tmp_path / "runs.txt"
    # attempt 1 times out at 1 s and returns at 1.6 s: while attempt 2 (from ~1 s) runs,
    # before attempt 2's own limit (~2 s)
    slow = schedule("tests.jobs.sleep_then_record", str(out), "slow", 1.6, timeout=1.0,
                    max_attempts=2, backoff=[0])
    assert burst(concurrency=2) == EXIT_OK
    wait_until(lambda: slow.job.status == JobStatus.DEAD, timeout=30)
    row = slow.job
    assert (row.attempts, row.error_type) == (2, JOB_TIMEOUT), row.last_error
    assert list(JobAttempt.objects.filter(job_id=slow.id).order_by("number").values_list(
        "number", "error_type")) == [(1, JOB_TIMEOUT), (2, JOB_TIMEOUT)]
