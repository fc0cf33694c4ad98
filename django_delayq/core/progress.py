"""``report_progress(value)``: a running job's progress, kept on its row (``Job.progress``).

The value is checked where it is given (JSON only, at most ``MAX_PROGRESS_BYTES`` encoded:
``InvalidJob`` naming it otherwise). Writes are throttled per job: the first report is
written at once, a later one only when ``INTERVAL_SECONDS`` have passed since the last
write; a report that comes sooner is kept and written by the next report past the interval
or, at the latest, when the job's attempt ends (``running`` exits), before the worker
settles it. So a job writes at most one value per interval plus its last one, and the row
ends with the last value reported.

The write is one ``UPDATE`` of that column by the job's own thread, on its own database
connection (the one a job function uses), guarded so that a final row is never changed.
Inside an ``async def`` job (an event loop runs in the thread), and inside a transaction
of the job's (the write would join it: the job's row locked until it ends, the audit
writer's flush of that row waiting behind it, the value gone with a rollback), the write
goes to one helper thread of the process instead, on its own connection; the attempt's
end waits for it. A write that fails is logged, never raised into the job: progress is a
display, not a result. The value kept for a later write is a copy made when it was
checked: a job that changes the object afterwards changes nothing written.

An atomic job's attempt (``worker/atomic.py``) runs inside its transaction, which on
SQLite holds the database's write lock: a write on any other connection would wait for
that lock while the attempt waits for the write. Its values are written in that
transaction instead (``in_attempt``): each report only keeps its value (values written
in the transaction are seen by nobody before its commit), and the last one is written when
the function returns, on the attempt's thread and connection, in a savepoint (a failed
write leaves the attempt's transaction usable). It shows at the commit; an attempt that
raises writes nothing, and one rolled back later (its time limit, a result too large, a
lost lease) takes its value back with the rest.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from django.db import DatabaseError, connections, router, transaction

from django_delayq.core import context, validation
from django_delayq.engine.logtext import shown
from django_delayq.exceptions import InvalidJob, NotInJob
from django_delayq.models import FINAL_STATUSES, Job

logger = logging.getLogger(__name__)

MAX_PROGRESS_BYTES = 4096  # of the value encoded as compact JSON, in UTF-8
INTERVAL_SECONDS = 0.5  # at most one write per job in this time, plus the last value

_NOTHING = object()


def check(value: object) -> str:
    """The compact JSON of ``value``; ``InvalidJob`` naming it when it is not JSON, holds a
    NUL (PostgreSQL's jsonb refuses it: ``find_bad`` names it, in a string or a key) or is
    over ``MAX_PROGRESS_BYTES``."""
    if bad := validation.find_bad(value, "progress", ints=True):
        raise InvalidJob("report_progress() takes a number or small JSON (str, int, float, "
                         "bool, None, list, dict); %s is not" % bad)
    encoded = validation.dumps(value)
    if (size := validation.utf8_size(encoded)) > MAX_PROGRESS_BYTES:
        raise InvalidJob("report_progress(%s) is %d bytes of JSON, over the %d a progress "
                         "value may take; report a number or a few fields"
                         % (validation.short(value), size, MAX_PROGRESS_BYTES))
    return encoded


class Reporter:
    """The throttled progress of one attempt. ``writes`` counts the values written;
    ``write`` writes one (by default on the job's row, unless the row is final).
    ``using``: the database of an atomic job's attempt transaction, which this reporter
    runs in: only the last value is written, by ``finish``, in that transaction."""

    def __init__(self, job_id: str, write: Callable[[Any], None] | None = None,
                 interval: float = INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic, using: str | None = None) -> None:
        self.job_id, self.interval, self._clock, self.using = job_id, interval, clock, using
        self._write = write  # None: the row (a bound method here would be a cycle per job)
        self._lock = threading.Lock()  # a job may report from threads of its own
        self._write_lock = threading.Lock()  # one write at a time, in the order sent
        self._last: float | None = None
        self._pending: Any = _NOTHING
        self._futures: list[Future[None]] = []
        self.writes = 0

    def report(self, value: object) -> None:
        with self._lock:
            now = self._clock()
            if self.using is not None or (
                    self._last is not None and now - self._last < self.interval):
                self._pending = value  # written by a later report or at the end
                return
            self._pending, self._last = _NOTHING, now
        self._send(value)

    def finish(self) -> None:
        """Write the value still pending and wait for the helper thread's writes (those
        first: an earlier value written after the last one would stay on the row)."""
        for future in self._futures:
            future.result()
        with self._lock:
            value, self._pending = self._pending, _NOTHING
        if value is _NOTHING:
            return
        if self.using is not None:
            self._write_in_attempt(self.using, value)
            return
        self._send(value)
        for future in self._futures:
            future.result()

    def discard(self) -> None:
        """Forget the value pending (an atomic job that raised: its attempt rolls back)."""
        with self._lock:
            self._pending = _NOTHING

    def _write_in_attempt(self, using: str, value: object) -> None:
        """``value`` written in the attempt's transaction, in a savepoint; nothing when
        that transaction is broken already (it rolls back: its commit fails)."""
        if connections[using].needs_rollback:
            return
        self.writes += 1
        try:
            with transaction.atomic(using=using):
                (self._write or self._write_row)(value)
        except DatabaseError as exc:
            logger.warning("job %s: its progress could not be written: %s", shown(self.job_id),
                           shown(exc))

    def _send(self, value: object) -> None:
        self.writes += 1
        # In an event loop Django refuses a blocking query; in the job's transaction the
        # write would join it: the helper thread, on a connection of its own.
        if _in_event_loop() or connections[router.db_for_write(Job)].in_atomic_block:
            self._futures.append(_helper(os.getpid()).submit(self._write_logged, value))
        else:
            with self._write_lock:
                self._write_logged(value)

    def _write_row(self, value: object) -> None:
        (Job.objects.using(router.db_for_write(Job)).filter(pk=self.job_id)
         .exclude(status__in=FINAL_STATUSES).update(progress=value))

    def _write_logged(self, value: object) -> None:
        try:
            (self._write or self._write_row)(value)
        except DatabaseError as exc:
            logger.warning("job %s: its progress could not be written: %s", shown(self.job_id),
                           shown(exc))


_reporter: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar(
    "delayq_progress", default=None)


def report_progress(value: object) -> None:
    """Record ``value`` (a number or small JSON) as the running job's progress.

    ``InvalidJob`` names a value that is not JSON or is over 4 KB encoded; ``NotInJob``
    when no job runs in this context. Throttled: see this module's docstring."""
    encoded = check(value)
    reporter = _reporter.get()
    if reporter is None:
        raise NotInJob("report_progress() is for a running job function; no job runs here")
    reporter.report(json.loads(encoded))  # a copy: later changes to ``value`` are not kept


_attempt_db: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "delayq_attempt_db", default=None)


@contextmanager
def in_attempt(using: str) -> Iterator[None]:
    """The block is an atomic job's attempt transaction on database ``using``: the job
    ``running`` in it writes its progress there (this module's docstring)."""
    token = _attempt_db.set(using)
    try:
        yield
    finally:
        _attempt_db.reset(token)


@contextmanager
def running(ctx: context.JobContext) -> Iterator[Reporter]:
    """Run the block as job ``ctx``: ``current_job()`` returns it and ``report_progress``
    writes to its row; the last value pending is written on exit (in an atomic job's
    attempt, only if the block returns)."""
    reporter = Reporter(ctx.id, using=_attempt_db.get())
    job_token = context._current.set(ctx)
    token = _reporter.set(reporter)
    attempt_token = _attempt_db.set(None)  # a job run inside this one is not in_attempt
    try:
        yield reporter
    except BaseException:
        if reporter.using is not None:
            reporter.discard()  # its attempt rolls back: nothing to write
        raise
    finally:
        _attempt_db.reset(attempt_token)
        _reporter.reset(token)
        context._current.reset(job_token)
        try:
            reporter.finish()
        except Exception:  # noqa: BLE001 - never the job's outcome
            logger.exception("job %s: its last progress could not be written", shown(ctx.id))


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@lru_cache(maxsize=1)
def _helper(pid: int) -> ThreadPoolExecutor:
    """One writer thread per process: asked with ``os.getpid()``, so that a forked child
    makes its own (the parent's thread is not in the child)."""
    return ThreadPoolExecutor(1, thread_name_prefix="delayq-progress")


def compact(value: object, limit: int = 40) -> str:
    """One short line of plain text for a progress value (the list, the dashboard,
    ``delayq_status``): a number as it prints, a string as it is, other JSON compact; cut to
    ``limit`` characters with an ellipsis; "" for none. The caller escapes it."""
    if value is None:
        return ""
    if isinstance(value, float):
        text = "%g" % value
    elif isinstance(value, str):
        text = value
    else:
        text = validation.dumps(value)
    text = " ".join(text.split())  # one line
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"
