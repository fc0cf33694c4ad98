"""Failures as data: a failed attempt records its exception's dotted path, its message and
its traceback as three fields, on the job row and on its ``JobAttempt``."""

from __future__ import annotations

import time

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.testing import run_due_jobs
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.housekeeping import LeaseRecovery
from django_delayq.worker.outcome import LOST_LEASE

pytestmark = pytest.mark.django_db(transaction=True)

RAISES = "tests.jobs_more.raise_value_error"


def _last_line(traceback: str) -> str:
    return traceback.rstrip("\n").splitlines()[-1]


def test_raising_job_records_type_message_and_traceback_apart(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    h = schedule(RAISES, "bad input: 42", max_attempts=2, backoff=[3600])
    assert run_due_jobs() == 1
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.error_type, row.last_error) == (
        JobStatus.RETRYING, "builtins.ValueError", "bad input: 42")
    assert row.traceback.startswith("Traceback (most recent call last)")
    assert "raise ValueError(message)" in row.traceback
    assert _last_line(row.traceback) == "ValueError: bad input: 42"
    [attempt] = JobAttempt.objects.filter(job_id=h.id)
    assert (attempt.number, attempt.outcome, attempt.error_type, attempt.error) == (
        1, JobStatus.RETRYING, "builtins.ValueError", "bad input: 42")
    assert attempt.traceback == row.traceback


def test_retry_and_refusal_record_their_exception_types(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    retried = schedule("tests.jobs.ask_retry", 3600, max_attempts=3)
    refused = schedule("tests.jobs.boom", "x")
    Job.objects.filter(pk=refused.id).update(callable_path="os.system")
    run_due_jobs()
    row = Job.objects.get(pk=retried.id)
    assert (row.status, row.error_type, row.last_error) == (
        JobStatus.RETRYING, "django_delayq.exceptions.Retry", "retry requested")
    row = Job.objects.get(pk=refused.id)
    assert (row.status, row.error_type) == (JobStatus.DEAD,
                                            "django_delayq.core.registry.NotAllowed")
    assert row.last_error.startswith("not allowed: 'os.system'") and "ALLOWED_CALLABLES" in row.last_error


def test_a_job_s_own_permission_error_is_a_failure_retried_by_its_policy(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """Only a refusal (the allow-list, a refused callback URL) ends a job dead at once."""
    denied = schedule("tests.jobs_more.raise_permission_error", "Permission denied",
                      max_attempts=3, backoff=[3600])
    run_due_jobs()
    row = Job.objects.get(pk=denied.id)
    assert (row.status, row.error_type) == (JobStatus.RETRYING, "builtins.PermissionError")
    assert not row.last_error.startswith("not allowed")


def test_eager_run_records_type_message_and_traceback(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "EAGER": True}
    with pytest.raises(ValueError, match="eager failure"):  # runs inline after commit
        schedule(RAISES, "eager failure")
    row = Job.objects.get()
    assert (row.status, row.error_type, row.last_error) == (
        JobStatus.DEAD, "builtins.ValueError", "eager failure")
    assert _last_line(row.traceback) == "ValueError: eager failure"


def test_lease_expired_attempt_records_lease_lost(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop", max_attempts=2)
    engine = get_engine()
    claimed = engine.claim("default", 10, 50).jobs
    assert [j.id for j in claimed] == [h.id]
    engine.mark_started(claimed)  # its run started: a lost lease of it is an attempt
    audit = AuditWriter()
    recovery = LeaseRecovery(engine, get_settings(), audit)
    deadline = time.monotonic() + 10
    while True:  # until the 50 ms lease, which nobody extends, is taken back
        recovery.recover("default")
        audit.flush()
        row = Job.objects.get(pk=h.id)
        if row.status != JobStatus.SCHEDULED or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    lost = "django_delayq.exceptions.LeaseLost"
    assert (row.status, row.error_type, row.last_error, row.traceback) == (
        JobStatus.RETRYING, lost, LOST_LEASE, "")
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list(
        "number", "outcome", "error_type", "error")) == [(1, "retrying", lost, LOST_LEASE)]
