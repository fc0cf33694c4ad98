"""Batched audit writes for the worker.

Status changes are collected per job id (a later change of the same job merges
into the earlier one) and flushed every ``AUDIT_FLUSH_SECONDS`` or ``AUDIT_BATCH``
changes as one ``executemany`` UPDATE per column set, plus one bulk INSERT of
``JobAttempt`` rows: a fast job costs one row update, not one per state.

No value can stop the writer. Text is made storable before it is written (lone
surrogates and NUL escaped: neither SQLite's UTF-8 nor PostgreSQL's text takes them). When
a batch fails, the error decides: an outage (the database unreachable, a table missing:
``OperationalError``, ``ProgrammingError``, ...) keeps every change for the next flush; a
data error (``DataError``, ``IntegrityError``, ``ValueError``, ...) retries the batch row
by row, so the one change the database refuses is written without its result, or
dropped with an error logged, and the others are written. Failures are logged once per
outage with a traceback, then at most every few seconds (``OutageLog``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import (
    DataError,
    IntegrityError,
    close_old_connections,
    connections,
    router,
    transaction,
)

from django_delayq.core import workflows
from django_delayq.engine.logtext import shown
from django_delayq.engine.replies import chunks
from django_delayq.models import (
    FINAL_SQL,
    FINAL_STATUSES,
    JOB_COLUMNS,
    Job,
    JobAttempt,
    JobStatus,
    db_datetime,
)
from django_delayq.worker.outcome import LEASE_LOST, storable

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

logger = logging.getLogger(__name__)
# How long an attempt written early (``write_now``) is remembered, lest a flush write it
# again: the settler records it only when Redis settled its job while it was written.
EARLY_KEPT_SECONDS = 600.0

COLUMNS = ("status", "run_at", "started_at", "finished_at", "attempts", "worker_id",
           "error_type", "last_error", "traceback", "result", "updated_at")
_COLUMN_SET = frozenset(COLUMNS)
_DATETIMES = {"run_at", "started_at", "finished_at", "updated_at"}
_TEXT = ("status", "worker_id", "error_type", "last_error", "traceback")
# Errors that one row's values cause; anything else (OperationalError, ...) is an outage.
DATA_ERRORS = (DataError, IntegrityError, ValueError, TypeError, OverflowError)


class OutageLog:
    """Logs a failure once with its traceback, then at most one line every ``every``
    seconds while it lasts, and one line when it ends: an outage must not flood the log.
    Exceptions of the ``quiet`` types are logged as warnings without traceback."""

    def __init__(self, log: logging.Logger, what: str, every: float = 5.0,
                 quiet: tuple[type[BaseException], ...] = ()) -> None:
        self.log, self.what, self.every, self.quiet = log, what, every, quiet
        self.since: float | None = None
        self.failures = 0
        self.pause = 0.0  # ``backoff``'s last pause
        self._next = 0.0

    def backoff(self, exc: BaseException) -> float:
        """Log ``exc`` (``failed``) and return the pause before the next try: 0.1 s,
        doubling to 5 s while the failures go on (``ok`` starts again)."""
        self.pause = min(max(self.pause * 2, 0.1), 5.0)
        self.failed(exc, self.pause)
        return self.pause

    def failed(self, exc: BaseException, retry_in: float) -> None:
        now = time.monotonic()
        self.failures += 1
        quiet = isinstance(exc, self.quiet)
        level = logging.WARNING if quiet else logging.ERROR
        if self.since is None:
            self.since, self._next = now, now + self.every
            self.log.log(level, "%s failed; retrying in %.1fs: %s", self.what, retry_in,
                         _safe(exc), exc_info=None if quiet else exc)
        elif now >= self._next:
            self._next = now + self.every
            self.log.log(level, "%s still failing after %.0fs (%d failures); retrying in "
                         "%.1fs: %s", self.what, now - self.since, self.failures, retry_in,
                         _safe(exc))

    def ok(self) -> None:
        self.pause = 0.0
        if self.since is not None:
            self.log.warning("%s works again after %.1fs (%d failures)", self.what,
                             time.monotonic() - self.since, self.failures)
            self.since, self.failures = None, 0


def _safe(exc: BaseException) -> str:
    try:
        return shown(str(exc), 2000) or type(exc).__name__
    except Exception:  # noqa: BLE001
        return type(exc).__name__


class AuditWriter:
    """Thread-safe buffer of row changes, flushed by its own thread (``start``; at once after
    ``flush_soon``) or ``flush``."""

    def __init__(self, flush_seconds: float = 0.05, batch: int = 500) -> None:
        self.flush_seconds, self.batch = flush_seconds, batch
        self._lock = threading.Condition()
        self._changes: dict[str, dict[str, Any]] = {}
        self._attempts: list[JobAttempt] = []
        # One flush at a time: a flush called while the thread writes a batch waits for
        # it, so what was buffered before the call is written when flush() returns.
        self._flushing = threading.RLock()
        self._stopping = False
        self._soon = False  # flush_soon() asked: the thread flushes without waiting
        # Called before each write: a supervised child sends its supervisor the reports
        # of its claimed and started jobs first, so a row that says ``running`` is never
        # ahead of what the supervisor knows (it takes back a killed child's jobs by them).
        self.before_write: Callable[[], None] | None = None
        # Called after a write committed, with the ids it made final (the settler drops
        # their settled records in Redis: worker/settle.py).
        self.after_write: Callable[[list[str]], None] | None = None
        self._thread: threading.Thread | None = None
        self._outage = OutageLog(logger, "audit flush")
        # (job id, number, start) -> when (monotonic): attempts written by write_now
        self._early: dict[tuple[str, int, Any], float] = {}

    def update(self, job_id: str, **fields: Any) -> None:
        if not _COLUMN_SET.issuperset(fields):
            raise ValueError("not audit columns: %s" % sorted(set(fields) - _COLUMN_SET))
        with self._lock:
            self._changes.setdefault(job_id, {}).update(fields)
            if len(self._changes) >= self.batch:
                self._lock.notify()

    def attempt(self, **fields: Any) -> None:
        attempt = JobAttempt(**fields)
        _storable(attempt)
        with self._lock:
            self._attempts.append(attempt)

    def flush_soon(self) -> None:
        """Have the writer's thread flush now rather than after its interval; never waits
        (a caller that must not block on the database, as the main loop)."""
        with self._lock:
            self._soon = True
            self._lock.notify()

    def pending(self) -> int:
        with self._lock:
            return len(self._changes) + len(self._attempts)

    # -- flushing -------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="delayq-audit", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - the database is down as we stop
            logger.error("audit: %d row change(s) not written at stop; their rows keep their "
                         "previous state: %s", self.pending(), _safe(exc))

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not (self._stopping or self._soon) and len(self._changes) < self.batch:
                    self._lock.wait(self.flush_seconds)
                stopping, self._soon = self._stopping, False
            self._flush_or_keep()
            if stopping:
                connections.close_all()  # this thread's own connections
                return

    def _flush_or_keep(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - kept for the next flush; never the thread
            pause = min(1.0, self.flush_seconds * 10)
            self._outage.failed(exc, pause)
            close_old_connections()
            time.sleep(pause)
        else:
            self._outage.ok()

    def flush(self) -> int:
        """Write what is buffered; returns how many row changes were written. An outage
        raises and keeps everything for the next flush. Waits for a flush under way in
        another thread (its batch is written, or kept, when this returns)."""
        with self._flushing:
            with self._lock:
                changes, self._changes = self._changes, {}
                attempts, self._attempts = self._attempts, []
            if self._early and attempts:  # written by write_now already
                attempts = [a for a in attempts
                            if self._early.pop((a.job_id, a.number, a.started_at), None) is None]
            if not changes and not attempts:
                return 0
            if self.before_write is not None:
                self.before_write()
            try:
                landed = self._write(changes, attempts)
            except DATA_ERRORS as exc:
                logger.warning("audit: a batch of %d row change(s) was refused (%s); writing "
                               "them one by one", len(changes), _safe(exc))
                return self._write_each(changes, attempts)
            except BaseException:
                self._keep(changes, attempts)
                raise
            self._landed(landed)
            return len(changes)

    def write_now(self, changes: dict[str, dict[str, Any]], attempts: list[JobAttempt],
                  fence: Callable[[BaseDatabaseWrapper], None] | None = None) -> None:
        """Write ``changes`` and ``attempts`` at once on the caller's thread, through the
        flushes' own write (its fences; the children of the rows made final resolved),
        nothing buffered: the final rows written during a Redis outage
        (``worker/early_rows.py``), which must commit while the lease is the worker's:
        ``fence(connection)`` runs before the transaction, first in it and last before its
        commit (it bounds the waits, and raises to roll it back). One at a time with the
        flushes: an attempt written here is not written again by a later flush (the
        settler records it too when Redis settles the job meanwhile). Raises what the
        write raises (nothing is kept for a later flush)."""
        if self.before_write is not None:
            self.before_write()
        for attempt in attempts:
            _storable(attempt)
        with self._flushing:
            self._write(changes, attempts, fence)
            now = time.monotonic()
            # the settler records one only when Redis settled the job during this write:
            # the others are forgotten after EARLY_KEPT_SECONDS (a requeued job's next run
            # has a start of its own: never taken for this one)
            self._early = {k: t for k, t in self._early.items() if now - t < EARLY_KEPT_SECONDS}
            self._early.update(((a.job_id, a.number, a.started_at), now) for a in attempts)

    def _landed(self, final: list[str]) -> None:
        if self.after_write is not None and final:
            self.after_write(final)

    def _keep(self, changes: dict[str, dict[str, Any]], attempts: list[JobAttempt]) -> None:
        with self._lock:  # newer changes win over the failed ones
            for job_id, fields in changes.items():
                self._changes[job_id] = {**fields, **self._changes.get(job_id, {})}
            self._attempts[:0] = attempts

    def _write_each(self, changes: dict[str, dict[str, Any]], attempts: list[JobAttempt]) -> int:
        """Row by row: a change the database refuses is retried without its result, then
        dropped with an error logged; an outage keeps what is left and raises."""
        items = list(changes.items())
        written = 0
        for i, (job_id, fields) in enumerate(items):
            try:
                one = self._write_one(job_id, fields)
            except BaseException:
                self._keep(dict(items[i:]), attempts)
                raise
            if one is not None:  # a change dropped leaves Redis's settled record
                written += 1
                self._landed(one)
        for i, attempt in enumerate(attempts):
            try:
                self._write({}, [attempt])
            except DATA_ERRORS as exc:
                logger.error("audit: job %s: attempt %s dropped, the database refuses it: %s",
                             shown(attempt.job_id), attempt.number, _safe(exc))
            except BaseException:
                self._keep({}, attempts[i:])
                raise
        return written

    def _write_one(self, job_id: str, fields: dict[str, Any]) -> list[str] | None:
        """The row change written (the ids it made final, as ``_write``), else None."""
        try:
            return self._write({job_id: fields}, [])
        except DATA_ERRORS as exc:
            first = exc
        bare = {k: v for k, v in fields.items() if k not in ("result", "traceback")}
        try:
            final = self._write({job_id: bare}, [])
        except DATA_ERRORS as exc:
            logger.error("audit: job %s: row change dropped, the database refuses it (%s): %s",
                         shown(job_id), _safe(first), _safe(exc))
            return None
        logger.error("audit: job %s: written without its result and traceback, which the "
                     "database refuses: %s", shown(job_id), _safe(first))
        return final

    def _write(self, changes: dict[str, dict[str, Any]], attempts: list[JobAttempt],
               fence: Callable[[BaseDatabaseWrapper], None] | None = None) -> list[str]:
        """Write ``changes`` and ``attempts`` in one transaction; the ids of the rows it made
        final whose rows are final after it (``_final_rows``): the guard may have kept one."""
        using = router.db_for_write(Job)
        conn = connections[using]
        if fence is not None:  # SQLite's transaction waits for its lock as it begins
            fence(conn)
        groups: dict[tuple[str, ...], list[list[Any]]] = {}
        adapt = _adapters(conn)
        for job_id, fields in changes.items():
            cols = tuple(c for c in COLUMNS if c in fields)
            params = [adapt[c](fields[c]) for c in cols] + [job_id]
            if "attempts" in fields:  # guard: never overwrite a later attempt's record
                params.append(fields["attempts"])
            groups.setdefault(cols, []).append(params)
        qn = conn.ops.quote_name
        table = qn(Job._meta.db_table)
        with transaction.atomic(using=using):
            if fence is not None:
                fence(conn)
            with conn.cursor() as cursor:
                if conn.vendor == "postgresql" and len(changes) > 1:
                    # Row locks in one order (by id) whatever the column sets: two flushes
                    # touching the same rows (a re-run, the reconciler) never deadlock.
                    cursor.execute("SELECT 1 FROM %s WHERE %s IN (%s) ORDER BY %s FOR UPDATE"
                                   % (table, qn("id"), ", ".join(["%s"] * len(changes)),
                                      qn("id")), sorted(changes))
                for cols, rows in sorted(groups.items()):
                    rows.sort(key=lambda params: params[len(cols)])  # by id
                    sets = ", ".join("%s = %%s" % qn(JOB_COLUMNS[c]) for c in cols)
                    where = "%s = %%s" % qn("id")
                    if "attempts" in cols:
                        # Workers flush independently: a late write about attempt n (a
                        # recovered lease, say) must not undo what attempt n+1 recorded.
                        where += " AND %s <= %%s" % qn("attempts")
                    # A final row stays final: a lease taken back after the job settled (a
                    # Redis failover that lost the ack) must not reopen it; only requeue()
                    # does, through the API.
                    where += " AND %s NOT IN (%s)" % (qn("status"), FINAL_SQL)
                    cursor.executemany("UPDATE %s SET %s WHERE %s" % (table, sets, where), rows)
                    if "attempts" in cols and "status" in cols and cursor.rowcount < len(rows):
                        _count_late_runs(cursor, table, qn, cols, rows)  # the guard kept some
            if attempts := _unrefuted(using, attempts):
                JobAttempt.objects.using(using).bulk_create(attempts, batch_size=self.batch)
            # Children of parents this flush made final: released or cancelled in this
            # same transaction (the release invariant, core/workflows.py).
            if final := [i for i, f in changes.items() if f.get("status") in FINAL_STATUSES]:
                workflows.resolve(final, using)
                final = _final_rows(conn, final)
            if fence is not None:
                fence(conn)
        return final


def _unrefuted(using: str, attempts: list[JobAttempt]) -> list[JobAttempt]:
    """``attempts`` but the lost leases their rows refute: attempt n recorded as lost
    (a lease taken back) whose row says attempt n succeeded. An atomic attempt that held
    SQLite's write lock through its lease's recovery committed first; that record, which
    waited for the lock, is wrong. One read, only for flushes with lost leases."""
    lost = {(a.job_id, a.number) for a in attempts if a.error_type == LEASE_LOST}
    if not lost:
        return attempts
    done: set[tuple[str, int]] = set()
    for chunk in chunks(sorted({job_id for job_id, _ in lost}), workflows.CHUNK):
        done.update(Job.objects.using(using).filter(
            pk__in=chunk, status=JobStatus.SUCCEEDED).values_list("pk", "attempts"))
    return [a for a in attempts if (a.job_id, a.number) not in done or a.error_type != LEASE_LOST]


def _storable(attempt: JobAttempt) -> None:
    """``attempt``'s text made storable, its times as its row stores them (``db_datetime``:
    ``bulk_create`` converts none; the start also keys ``write_now``'s attempts)."""
    for name in ("error_type", "error", "traceback", "worker_id"):
        setattr(attempt, name, storable(getattr(attempt, name)))
    attempt.started_at = db_datetime(attempt.started_at)
    attempt.finished_at = db_datetime(attempt.finished_at)


def _count_late_runs(cursor: Any, table: str, qn: Callable[[str], str],
                     cols: tuple[str, ...], rows: list[list[Any]]) -> None:
    """A success recorded about a later attempt than a final row counts (after a loss of
    Redis's data a job settled there whose row had not landed may run again): the row
    stays as it ended but counts the run in ``attempts``; a failure's run has its
    ``JobAttempt`` already. One statement, only when the guard kept rows of a flush."""
    status, n = cols.index("status"), len(cols)  # a row: values of cols, id, attempts
    late = [[p[-1], p[n], p[-1]] for p in rows if p[status] == JobStatus.SUCCEEDED]
    if late:
        cursor.executemany("UPDATE %s SET %s = %%s WHERE %s = %%s AND %s < %%s AND %s IN (%s)"
                           % (table, qn("attempts"), qn("id"), qn("attempts"), qn("status"),
                              FINAL_SQL), late)


def _final_rows(conn: BaseDatabaseWrapper, ids: list[str]) -> list[str]:
    """Which of ``ids`` have final rows, read in the write's transaction: a change making a
    row final that the guard kept (the row says a later attempt: a redelivered copy runs
    it) did not land, and its settled record stays in Redis (``after_write``)."""
    qn, final = conn.ops.quote_name, []
    with conn.cursor() as cursor:
        for chunk in chunks(ids, workflows.CHUNK):  # within SQLite's 999 parameters
            cursor.execute("SELECT %s FROM %s WHERE %s IN (%s) AND %s IN (%s)" % (
                qn("id"), qn(Job._meta.db_table), qn("id"), ", ".join(["%s"] * len(chunk)),
                qn("status"), FINAL_SQL), list(chunk))
            final += [row[0] for row in cursor.fetchall()]
    return final


def _adapters(conn: BaseDatabaseWrapper) -> dict[str, Callable[[Any], Any]]:
    """One value adapter per column for ``conn``, decided once per flush. A datetime is
    written as the ORM stores it: ``db_datetime`` (without ``USE_TZ``, the wall time of
    ``TIME_ZONE``), then the backend's adapter."""
    adapt_dt, iso = conn.ops.adapt_datetimefield_value, datetime.isoformat
    naive = not settings.USE_TZ
    sqlite_utc = conn.vendor == "sqlite" and conn.timezone_name == "UTC" and not naive

    last: list[Any] = [None, None]  # the last value adapted, and what it became

    def moment(value: datetime | None) -> Any:
        if value is None:
            return None
        if value is last[0]:  # a row's updated_at is its started_at or finished_at
            return last[1]
        # on SQLite in UTC, what the adapter returns, 10x faster: without the "+00:00"
        out = (iso(value, " ")[:-6] if sqlite_utc and value.tzinfo is UTC
               else adapt_dt(db_datetime(value) if naive else value))
        last[0], last[1] = value, out
        return out

    return {**dict.fromkeys(COLUMNS, lambda value: value), **dict.fromkeys(_TEXT, storable),
            **dict.fromkeys(_DATETIMES, moment),
            "result": lambda value: None if value is None else json.dumps(value)}  # JSON
