"""A job's result is bounded like its arguments: over ``MAX_PAYLOAD_BYTES`` as JSON, the
attempt fails with ``ResultTooLarge`` naming the size and the limit, and the job ends
dead without a retry (the same value would be as large again); the value is not kept."""

from __future__ import annotations

import pytest

from django_delayq import schedule
from django_delayq.exceptions import JobFailed, ResultTooLarge
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.testing import run_due_jobs
from django_delayq.worker.runner import stored_result

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 2000
TOO_LARGE = "result is 3002 bytes as JSON, over DELAYQ['MAX_PAYLOAD_BYTES'] = 2000"


@pytest.fixture
def small_limit(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "MAX_PAYLOAD_BYTES": LIMIT}
    return delayq_settings


def test_a_result_over_the_limit_ends_the_job_dead_without_retry(small_limit) -> None:  # type: ignore[no-untyped-def]
    big = schedule("tests.jobs_more.big_result", 3000, max_attempts=3)
    fits = schedule("tests.jobs_more.big_result", LIMIT - 2)  # exactly the limit as JSON
    assert run_due_jobs() == 2
    row = Job.objects.get(pk=big.id)
    assert (row.status, row.attempts, row.result) == (JobStatus.DEAD, 1, None)
    assert row.error_type == "django_delayq.exceptions.ResultTooLarge"
    assert row.last_error.startswith(TOO_LARGE) and "not retried" in row.last_error
    [attempt] = JobAttempt.objects.filter(job_id=big.id)
    assert attempt.error.startswith(TOO_LARGE)
    with pytest.raises(JobFailed, match="ResultTooLarge"):
        _ = big.result
    assert fits.result == "x" * (LIMIT - 2)


def test_eager_mode_marks_the_row_dead_as_a_worker_would(small_limit) -> None:  # type: ignore[no-untyped-def]
    small_limit.DELAYQ = {**small_limit.DELAYQ, "EAGER": True}
    with pytest.raises(ResultTooLarge, match="not kept"):  # runs inline after commit
        schedule("tests.jobs_more.big_result", 3000)
    row = Job.objects.get()
    assert (row.status, row.result) == (JobStatus.DEAD, None)
    assert row.error_type == "django_delayq.exceptions.ResultTooLarge"
    assert row.last_error.startswith(TOO_LARGE)
    [attempt] = row.attempt_history.all()  # as a worker writes it: the report counts them
    assert (attempt.number, attempt.outcome, attempt.error) == (1, JobStatus.DEAD,
                                                                row.last_error)
    assert attempt.error_type == row.error_type and attempt.worker_id == "eager"


def test_eager_mode_failure_leaves_its_attempt_row(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "EAGER": True}
    with pytest.raises(RuntimeError, match="kaput"):
        schedule("tests.jobs.boom", "kaput")
    row = Job.objects.get()
    [attempt] = row.attempt_history.all()
    assert (row.status, row.attempts, attempt.outcome) == (JobStatus.DEAD, 1, JobStatus.DEAD)
    assert attempt.error == row.last_error and "kaput" in attempt.traceback


def test_a_result_the_database_cannot_store_is_not_kept_and_its_text_alike_is(  # type: ignore[no-untyped-def]
        delayq_settings) -> None:
    """A NUL or an integer past Python's int-to-text limit: the job succeeds, its result is
    not kept (None); a string holding a backslash before ``u0000`` is text, kept."""
    handles = {kind: schedule("tests.jobs_more.returns", kind) for kind in ("nul", "escape", "huge")}
    assert run_due_jobs() == 3
    rows = {kind: Job.objects.get(pk=h.id) for kind, h in handles.items()}
    assert {kind: (row.status, row.result) for kind, row in rows.items()} == {
        "nul": (JobStatus.SUCCEEDED, None), "escape": (JobStatus.SUCCEEDED, "a\\u0000b"),
        "huge": (JobStatus.SUCCEEDED, None)}


def test_only_a_real_nul_drops_a_result() -> None:
    """The text of NUL's escape beside what JSON stores differently (an int key, deep
    nesting) is kept; a NUL in a key is not."""
    deep: object = "C:\\u0000"
    for _ in range(150):
        deep = [deep]
    for value in ({1: "C:\\u0000"}, deep):
        assert stored_result(value)[0] is value
    assert stored_result({"k\x00": 1}) == (None, 0)
