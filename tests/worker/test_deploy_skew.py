"""A rolling deploy: a worker of the older code meets jobs that need the newer.

A job whose function this worker cannot resolve (a listed module that fails to import,
a function it lacks) is retried, whatever its ``retry_on`` says: ``retry_on`` decides
about the exceptions the job's own function raises, not about this worker's code being
older (docs/settings.md). A ``retry_on`` path this worker cannot import (a class of the
newer code) is compared as text, never imported: it turns nothing into ``dead``. Real
workers: in this process (``helpers.burst``) and ``delayq_worker --processes``.
"""

from __future__ import annotations

import pytest

from django_delayq import schedule
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import burst
from tests.worker.conftest import wait_or_dump

pytestmark = pytest.mark.django_db(transaction=True)

LATER = [3600]  # no retry runs within the test
NEWER = "tests.deployed_later"  # a listed module this worker's code does not have


def scheduled_as_newer(path: str, stored_retry_on: list[str] | None = None,
                       atomic: bool = False):  # type: ignore[no-untyped-def]
    """A job of ``path`` as a web process of the newer deploy scheduled it: its row names
    a function this worker lacks (and, with ``stored_retry_on``, exception classes of the
    newer code). ``schedule()`` here checks both against this code, so the row is edited."""
    h = schedule("tests.jobs.add", 1, 2, retry_on=[ConnectionError], max_attempts=2,
                 backoff=LATER, atomic=atomic)
    changed: dict[str, object] = {"callable_path": path}
    if stored_retry_on is not None:
        changed["retry_on"] = stored_retry_on
    Job.objects.filter(pk=h.id).update(**changed)
    return h


@pytest.fixture
def newer_listed(delayq_settings):  # type: ignore[no-untyped-def]
    allowed = delayq_settings.DELAYQ["ALLOWED_CALLABLES"]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "ALLOWED_CALLABLES": [*allowed, NEWER, "tests.jobs_broken"]}
    return delayq_settings


def test_a_job_this_worker_cannot_resolve_is_retried_whatever_its_retry_on_says(newer_listed) -> None:  # type: ignore[no-untyped-def]
    missing = scheduled_as_newer("tests.jobs.added_in_a_later_deploy")
    unimportable = scheduled_as_newer(NEWER + ".new_job")
    broken = scheduled_as_newer("tests.jobs_broken.job")  # its import raises RuntimeError
    in_transaction = scheduled_as_newer("tests.jobs.added_in_a_later_deploy", atomic=True)
    own = schedule("tests.jobs_more.imports_missing", retry_on=[ConnectionError],
                   max_attempts=2, backoff=LATER)
    assert burst() == EXIT_OK
    row = missing.job
    assert (row.status, row.attempts, row.error_type) == (
        JobStatus.RETRYING, 1, "builtins.AttributeError"), row.last_error
    assert "added_in_a_later_deploy" in row.last_error and "retry_on" not in row.last_error
    assert "added_in_a_later_deploy" in JobAttempt.objects.get(job_id=missing.id).traceback
    row = unimportable.job
    assert (row.status, row.attempts, row.error_type) == (
        JobStatus.RETRYING, 1, "builtins.ModuleNotFoundError"), row.last_error
    row = broken.job
    assert (row.status, row.attempts, row.error_type) == (
        JobStatus.RETRYING, 1, "builtins.RuntimeError"), row.last_error
    row = in_transaction.job  # an atomic job: resolved inside its transaction
    assert (row.status, row.attempts, row.error_type) == (
        JobStatus.RETRYING, 1, "builtins.AttributeError"), row.last_error
    # the job's own function failing to import something: its retry_on decides
    row = own.job
    assert (row.status, row.attempts, row.error_type) == (
        JobStatus.DEAD, 1, "builtins.ModuleNotFoundError")
    assert row.last_error.endswith(
        "(not retried: builtins.ModuleNotFoundError is not in retry_on)")
    # retried within its max_attempts, no further
    get_engine().reschedule("default", missing.id, delay_ms=0)
    assert burst() == EXIT_OK
    row = missing.job
    assert (row.status, row.attempts, row.error_type) == (
        JobStatus.DEAD, 2, "builtins.AttributeError")
    assert "retry_on" not in row.last_error


def test_a_retry_on_path_this_worker_cannot_import_is_compared_not_imported(newer_listed) -> None:  # type: ignore[no-untyped-def]
    new_error = NEWER + ".NewError"
    missing = scheduled_as_newer("tests.jobs.added_in_a_later_deploy",
                                 stored_retry_on=[new_error])
    listed = schedule("tests.jobs_more.raise_value_error", "listed", retry_on=[ValueError],
                      max_attempts=2, backoff=LATER)
    unlisted = schedule("tests.jobs_more.raise_value_error", "unlisted", retry_on=[ValueError],
                        max_attempts=2, backoff=LATER)
    Job.objects.filter(pk=listed.id).update(retry_on=[new_error, "builtins.ValueError"])
    Job.objects.filter(pk=unlisted.id).update(retry_on=[new_error])
    assert burst() == EXIT_OK
    assert (missing.job.status, missing.job.error_type) == (
        JobStatus.RETRYING, "builtins.AttributeError"), missing.job.last_error
    assert listed.job.status == JobStatus.RETRYING, listed.job.last_error
    row = unlisted.job  # the one class it lists is not the one raised
    assert (row.status, row.last_error) == (
        JobStatus.DEAD, "unlisted (not retried: builtins.ValueError is not in retry_on)")


@pytest.mark.worker
def test_a_worker_process_child_retries_a_job_it_cannot_resolve(start_worker) -> None:  # type: ignore[no-untyped-def]
    missing = scheduled_as_newer("tests.jobs.added_in_a_later_deploy")
    done = schedule("tests.jobs.add", 2, 3, retry_on=[ConnectionError])
    proc = start_worker("--processes", "1", "--burst")
    assert wait_or_dump(proc, 120) == EXIT_OK
    assert done.job.status == JobStatus.SUCCEEDED
    row = missing.job
    assert (row.status, row.attempts, row.error_type) == (
        JobStatus.RETRYING, 1, "builtins.AttributeError"), row.last_error
