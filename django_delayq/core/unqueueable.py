"""Rows the reconciler cannot work with, each on its own: an id the scripts refuse
(``engine.bad_id``: empty, over 256 bytes, control characters, not UTF-8), or a value the
reconciler reads that the API never writes (``problem``): a count of attempts that is no
count (SQLite keeps text in an integer column) or whose next attempt would not fit the
column, a due, creation or change time that is no instant, a priority outside -100..100,
a status that is not live, a queue, group or worker that is not text. Only a row written
into the database directly can have one. The reconciler ends such a row ``dead`` where it
reads it (``screen``: each batch of its walks, the second look at suspects, the running
rows of silent workers) and goes on with the others: re-enqueued, every claim would set
it aside and the next pass put it back, for ever; compared or counted, one such value
stopped every tick. It is written as every row the reconciler ends
(``reconcile_state.settle_row``): at the attempt a claim would have charged (the row's
count + 1; where the count is the bad value, one more than the job's recorded attempts),
its reason (``invalid row: ...``, naming the field and its value) on the row and on a
dead attempt; it sends ``job_dead`` and resolves its waiting children, like any death. A
row the database refuses to write as well is left as it is, with a warning naming it,
each time it is read. A column the driver cannot read at all fails the query of the whole
batch: ``read`` then reads the batch row by row and ends such a row the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, DataError

from django_delayq.core import reconcile_state
from django_delayq.core.option_checks import MAX_PRIORITY, MIN_PRIORITY
from django_delayq.core.validation import at_ms, short
from django_delayq.engine import bad_id
from django_delayq.engine.logtext import shown
from django_delayq.exceptions import InvalidRow, type_path
from django_delayq.models import LIVE_STATUSES, Job, JobAttempt, JobStatus

if TYPE_CHECKING:
    from django.db.models import QuerySet

logger = logging.getLogger(__name__)

INVALID_ROW = type_path(InvalidRow)
MAX_COUNT = 2**31 - 2  # the next attempt (+ 1) fits the column on every database
# A column the driver cannot turn into a value: a date SQLite holds that no calendar has
# (ValueError), a timestamp PostgreSQL stores that Python cannot hold (DataError)
UNREADABLE = (ValueError, TypeError, OverflowError, DataError)
TIMES = ("run_at", "created_at", "updated_at")


def _int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _instant(value: object) -> bool:
    if not isinstance(value, datetime):
        return False
    try:
        at_ms(value)
    except (OverflowError, ValueError, OSError):
        return False
    return True


# What the reconciler reads of a row (``reconcile_state.LIGHT``) but the id: the test, what
# it asks for
CHECKS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("attempts", lambda v: _int(v, 0, MAX_COUNT), "a count from 0 to %d" % MAX_COUNT),
    ("run_at", _instant, "a date and time"),
    ("created_at", _instant, "a date and time"),
    ("updated_at", _instant, "a date and time"),
    ("priority", lambda v: _int(v, MIN_PRIORITY, MAX_PRIORITY),
     "an integer from %d to %d" % (MIN_PRIORITY, MAX_PRIORITY)),
    ("status", lambda v: v in LIVE_STATUSES, "a live status"),
    ("queue", lambda v: isinstance(v, str), "text"),
    ("group", lambda v: isinstance(v, str), "text"),
    ("worker_id", lambda v: isinstance(v, str), "text"),
)


def problem(row: Job) -> str | None:
    """Why the reconciler cannot work with ``row`` (its ``last_error`` after "invalid row: "),
    or None."""
    if not isinstance(row.pk, str):
        return "id %s is not text: it cannot be enqueued" % short(row.pk, 100)
    if (why := bad_id(row.pk)) is not None:
        return "%s: it cannot be enqueued" % why
    for name, usable, wanted in CHECKS:
        if not usable(value := getattr(row, name)):
            return "%s is %s, not %s" % (name, short(value, 100), wanted)
    return None


def screen(rows: list[Job], dry_run: list[str] | None = None) -> list[Job]:
    """Those of ``rows`` the reconciler can work with; the others are ended ``dead`` (with
    ``dry_run``, a list: their ids are added to it, nothing is written)."""
    usable = []
    for row in rows:
        if (why := problem(row)) is None:
            usable.append(row)
        elif dry_run is not None:
            dry_run.append(row.pk)
        else:
            end(row, "invalid row: %s" % why)
    return usable


def end(row: Job, reason: str) -> bool:
    """``row`` ended ``dead`` with ``reason`` if its status (and its change time, when it is
    one) is as read; a row the database refuses is left as it is, with a warning."""
    try:
        counted = _int(row.attempts, 0, MAX_COUNT)
        number = row.attempts + 1 if counted else 1 + max(JobAttempt.objects.filter(
            job_id=row.pk).values_list("number", flat=True), default=0)
        unchanged: dict[str, Any] = {"updated_at": row.updated_at} if _instant(
            row.updated_at) else {}
        if counted:  # never below the row's count
            unchanged["attempts__lte"] = number
        return reconcile_state.settle_row(row, JobStatus.DEAD, number, reason,
                                          error_type=INVALID_ROW, unchanged=unchanged)
    except DatabaseError as exc:
        logger.warning("reconciler: job %s (queue %s): %s; the database refused to end it "
                       "(%s): left as it is", shown(row.pk), shown(row.queue), reason,
                       shown(exc))
        return False


def read(rows: QuerySet[Job], limit: int) -> list[Job]:
    """The first ``limit`` of ``rows``; when a column of one cannot be read (``UNREADABLE``),
    they are read one by one and such a row ends ``dead`` (``invalid row: run_at cannot be
    read (...)``), alone: the query of a batch failed with it, every tick."""
    try:
        return list(rows[:limit])
    except UNREADABLE:
        pass
    found: list[Job] = []
    for pk in list(rows.values_list("pk", flat=True)[:limit]):
        try:
            found += Job.objects.filter(pk=pk).only(*reconcile_state.LIGHT)
        except UNREADABLE as exc:
            if (row := Job.objects.filter(pk=pk).only(*(
                    f for f in reconcile_state.LIGHT if f not in TIMES)).first()) is not None:
                bad = [t for t in TIMES if not _readable(pk, t)] or ["a column"]
                row.__dict__.update(dict.fromkeys(TIMES))  # None: never loaded (deferred)
                end(row, "invalid row: %s cannot be read (%s)" % (", ".join(bad), shown(exc)))
    return found


def _readable(pk: str, column: str) -> bool:
    try:
        list(Job.objects.filter(pk=pk).values_list(column, flat=True))
    except UNREADABLE:
        return False
    return True
