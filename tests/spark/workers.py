"""Audit rows made by a real worker (``tests.helpers.burst``), for the report's tests.

Queue ``default``: ``ADD_JOBS`` jobs of ``tests.jobs.add`` that succeed, ``RETRIED_JOBS``
of ``tests.jobs.ask_retry`` that raise ``Retry`` once and then succeed, ``EXPIRED_JOBS``
of ``tests.jobs.add`` claimed after their ``expires_at`` (never run), ``CANCELLED_JOBS``
cancelled while scheduled, ``LIVE_JOBS`` still scheduled (due tomorrow).
Queue ``emails``: ``DEAD_JOBS`` of ``tests.jobs.boom`` that fail twice (a message with a
timestamp and colons in it) and end dead, ``RETRYING_JOBS`` of
``tests.jobs_more.raise_value_error`` waiting an hour for their second attempt, and
``CANCELLED_RETRYING`` more of those cancelled while they wait.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

ADD_JOBS = 150
RETRIED_JOBS = 40
EXPIRED_JOBS = 30
CANCELLED_JOBS = 20
LIVE_JOBS = 10
DEAD_JOBS = 30
RETRYING_JOBS = 20
CANCELLED_RETRYING = 10
TOTAL = (ADD_JOBS + RETRIED_JOBS + EXPIRED_JOBS + CANCELLED_JOBS + LIVE_JOBS + DEAD_JOBS
         + RETRYING_JOBS + CANCELLED_RETRYING)
DECLINED = "card declined at 2026-11-27T03:01:30.251+00:00: ref %d"
COLUMNS = ("id", "queue", "callable_path", "status", "attempts", "error_type", "last_error",
           "run_at", "created_at", "updated_at", "started_at", "finished_at")
ATTEMPT_COLUMNS = ("id", "job_id", "error_type", "error")
# attempt rows: one per failed attempt (an expiry or a cancel while waiting makes none)
FAILED_ATTEMPTS = RETRIED_JOBS + 2 * DEAD_JOBS + RETRYING_JOBS + CANCELLED_RETRYING


def _expired() -> None:
    """Jobs due now that expire 0.3 s later, left until that has passed: the worker claims
    them after their expiry and ends them ``expired``."""
    from django_delayq import schedule
    from tests.helpers import wait_until

    handles = [schedule("tests.jobs.add", i, i, expires=0.3) for i in range(EXPIRED_JOBS)]
    expiries = [h.job.expires_at for h in handles]
    last = max(e for e in expiries if e is not None) + timedelta(milliseconds=20)
    wait_until(lambda: datetime.now(UTC) > last, timeout=10)


def _scheduled() -> tuple[list[str], list[str]]:
    """Everything else; returns the ids to cancel now and those to cancel after the run."""
    from django_delayq import schedule

    for i in range(ADD_JOBS):
        schedule("tests.jobs.add", i, 1)
    for _ in range(RETRIED_JOBS):
        schedule("tests.jobs.ask_retry", 0)
    for i in range(DEAD_JOBS):
        schedule("tests.jobs.boom", DECLINED % i, queue="emails", max_attempts=2, backoff=[0])
    waiting = [schedule("tests.jobs_more.raise_value_error", "bad address %d" % i,
                        queue="emails", max_attempts=3, backoff=[3600]).id
               for i in range(RETRYING_JOBS + CANCELLED_RETRYING)]
    for i in range(LIVE_JOBS):
        schedule("tests.jobs.add", i, 2, delay=86400)
    later = [schedule("tests.jobs.add", i, 3, delay=3600).id for i in range(CANCELLED_JOBS)]
    return later, waiting[RETRYING_JOBS:]


def make_rows(midway: Callable[[], object] | None = None) -> list[dict[str, Any]]:
    """Run the jobs above through a real worker (``midway`` is called once they are
    scheduled, before the worker starts); returns the audit rows as they are."""
    from django_delayq import cancel
    from django_delayq.models import Job
    from django_delayq.worker.tracking import EXIT_OK
    from tests.helpers import burst, wait_until

    _expired()
    cancel_now, cancel_later = _scheduled()
    for job_id in cancel_now:
        cancel(job_id)
    if midway is not None:
        midway()
    assert burst(("default", "emails"), concurrency=4) == EXIT_OK
    for job_id in cancel_later:
        cancel(job_id)
    finished = Job.objects.exclude(status__in=("scheduled", "running"))
    wait_until(lambda: finished.count() == TOTAL - LIVE_JOBS, timeout=30)
    return list(Job.objects.values(*COLUMNS))


def attempt_rows() -> list[dict[str, Any]]:
    """The attempt rows (``JobAttempt``) as the database holds them."""
    from django_delayq.models import JobAttempt

    return list(JobAttempt.objects.values(*ATTEMPT_COLUMNS))
