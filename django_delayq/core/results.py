"""A job's result from its row: ``JobHandle.result`` and ``JobHandle.wait()``.

``result_of(row)``: a ``succeeded`` row's ``result`` (the JSON value the function
returned; ``None`` when it returned something JSON cannot hold); ``JobFailed`` for a row
that ended otherwise (``dead`` with its last error type and text, ``cancelled``,
``expired``); ``JobNotFinished`` for one still on its way (scheduled, waiting, running,
retrying).

``wait()`` reads the row until it is final: every ``poll`` seconds at first (10 ms), the
interval growing by half each time up to ``MAX_POLL_SECONDS`` (250 ms), each read its own
short query (no transaction is held while waiting). Inside an atomic block the row
cannot change under the caller (SQLite, and PostgreSQL's snapshot isolation, show the
caller's snapshot), so waiting for a row that is not final there raises
``TransactionManagementError`` at once; a final row returns its result anywhere (eager
mode runs the job before ``schedule()`` returns, outside a transaction).
"""

from __future__ import annotations

import math
import time
from typing import Any

from django.db import router, transaction
from django.db.transaction import TransactionManagementError

from django_delayq.core import validation
from django_delayq.exceptions import (
    InvalidJob,
    JobFailed,
    JobNotFinished,
    JobNotFound,
    WaitTimeout,
)
from django_delayq.models import FINAL_STATUSES, Job, JobStatus

MAX_POLL_SECONDS = 0.25
GROWTH = 1.5


def result_of(row: Job) -> Any:
    """The result of a final ``row``, or the error saying why there is none."""
    if row.status == JobStatus.SUCCEEDED:
        return row.result
    if row.status in FINAL_STATUSES:  # cancelled, expired: the reason, when one was kept
        dead = row.status == JobStatus.DEAD
        raise JobFailed(row.id, row.status, row.error_type if dead else "", row.last_error)
    raise JobNotFinished(row.id, row.status)


def _seconds(value: object, name: str, *, positive: bool, caller: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
            value) and (value > 0 if positive else value >= 0):
        return float(value)
    raise InvalidJob("%s(%s=%r): give %s seconds" % (
        caller, name, value, "a positive number of" if positive else "None or a number of"))


RESULT_COLUMNS = ("id", "status", "result", "error_type", "last_error")  # of ``result_of``


def read(job_id: str, only: tuple[str, ...] = RESULT_COLUMNS) -> Job:
    """The row of ``job_id`` (``only`` these columns; all for ``()``); ``JobNotFound``
    without one."""
    validation.check_lookup_id(job_id)  # a lone surrogate, NUL: no row has it
    rows = Job.objects.using(router.db_for_read(Job))
    try:
        return (rows.only(*only) if only else rows).get(pk=job_id)
    except Job.DoesNotExist:
        raise JobNotFound("no job with id %r" % (job_id,)) from None


class Waiting:
    """The pauses between the reads of a row that ``wait()`` and ``await_result()`` make:
    ``poll`` seconds at first, growing to ``MAX_POLL_SECONDS``, never past ``timeout``."""

    def __init__(self, job_id: str, timeout: float | None, poll: float,
                 caller: str = "wait") -> None:
        self.job_id, self.poll = job_id, poll
        self.limit = None if timeout is None else _seconds(timeout, "timeout", positive=False,
                                                           caller=caller)
        self.interval = _seconds(poll, "poll", positive=True, caller=caller)
        self.deadline = None if self.limit is None else time.monotonic() + self.limit

    def pause(self, row: Job) -> float:
        """Seconds to sleep before the next read of the (not final) ``row``;
        ``WaitTimeout`` once the time is up."""
        left = None if self.deadline is None else self.deadline - time.monotonic()
        if left is not None and left <= 0:
            raise WaitTimeout(self.job_id, self.limit or 0.0, row.status)
        interval = self.interval
        self.interval = min(interval * GROWTH, max(MAX_POLL_SECONDS, self.poll))
        return interval if left is None else min(interval, left)


def first_read(job_id: str, caller: str) -> Job:
    """The first read of a wait: ``TransactionManagementError`` when the row is not final
    and this thread is inside an atomic block (the row cannot change under it)."""
    row = read(job_id)
    if row.status not in FINAL_STATUSES and transaction.get_connection(
            router.db_for_read(Job)).in_atomic_block:
        raise TransactionManagementError(
            "%s for job %s inside an atomic block: the row (%s) cannot change under this "
            "transaction; wait after it commits (transaction.on_commit) or outside it"
            % (caller, job_id, row.status))
    return row


def wait(job_id: str, timeout: float | None = None, poll: float = 0.01) -> Any:
    """Block until job ``job_id`` is final and return ``result_of`` its row;
    ``WaitTimeout`` after ``timeout`` seconds (``None``: no limit)."""
    waiting = Waiting(job_id, timeout, poll)
    row = first_read(job_id, "wait()")
    while row.status not in FINAL_STATUSES:
        time.sleep(waiting.pause(row))
        row = read(job_id)
    return result_of(row)
