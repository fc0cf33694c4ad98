"""Batched audit writes for the worker.

Status changes are collected per job id (a later change of the same job merges
into the earlier one) and flushed every ``AUDIT_FLUSH_SECONDS`` or ``AUDIT_BATCH``
changes as one ``executemany`` UPDATE per column set, plus one bulk INSERT of
``JobAttempt`` rows: a fast job costs one row update, not one per state.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, close_old_connections, connections, router, transaction

from django_delayq.models import Job, JobAttempt

logger = logging.getLogger(__name__)

COLUMNS = ("status", "run_at", "started_at", "finished_at", "attempts", "worker_id",
           "last_error", "traceback", "result", "updated_at")
_DATETIMES = {"run_at", "started_at", "finished_at", "updated_at"}
_JSON = {"result"}
_COLUMN_NAMES = {f.name: str(f.column) for f in Job._meta.concrete_fields}


class AuditWriter:
    """Thread-safe buffer of row changes, flushed by its own thread (``start``) or ``flush``."""

    def __init__(self, flush_seconds: float = 0.05, batch: int = 500) -> None:
        self.flush_seconds = flush_seconds
        self.batch = batch
        self._lock = threading.Condition()
        self._changes: dict[str, dict[str, Any]] = {}
        self._attempts: list[JobAttempt] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.written = 0

    def update(self, job_id: str, **fields: Any) -> None:
        unknown = set(fields) - set(COLUMNS)
        if unknown:
            raise ValueError("not audit columns: %s" % sorted(unknown))
        with self._lock:
            self._changes.setdefault(job_id, {}).update(fields)
            if len(self._changes) >= self.batch:
                self._lock.notify()

    def attempt(self, **fields: Any) -> None:
        with self._lock:
            self._attempts.append(JobAttempt(**fields))

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
        self.flush()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._stopping and len(self._changes) < self.batch:
                    self._lock.wait(self.flush_seconds)
                stopping = self._stopping
            self._flush_or_keep()
            if stopping:
                connections.close_all()  # this thread's own connections
                return

    def _flush_or_keep(self) -> None:
        try:
            self.flush()
        except DatabaseError:
            logger.exception("audit flush failed; will retry")
            close_old_connections()
            time.sleep(min(1.0, self.flush_seconds * 10))

    def flush(self) -> int:
        with self._lock:
            changes, self._changes = self._changes, {}
            attempts, self._attempts = self._attempts, []
        if not changes and not attempts:
            return 0
        try:
            self._write(changes, attempts)
        except Exception:
            with self._lock:  # keep them: newer changes win over the failed ones
                for job_id, fields in changes.items():
                    self._changes[job_id] = {**fields, **self._changes.get(job_id, {})}
                self._attempts[:0] = attempts
            raise
        self.written += len(changes)
        return len(changes)

    def _write(self, changes: dict[str, dict[str, Any]], attempts: list[JobAttempt]) -> None:
        using = router.db_for_write(Job)
        conn = connections[using]
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
            with conn.cursor() as cursor:
                for cols, rows in groups.items():
                    sets = ", ".join("%s = %%s" % qn(_COLUMN_NAMES[c]) for c in cols)
                    where = "%s = %%s" % qn("id")
                    if "attempts" in cols:
                        # Workers flush independently: a late write about attempt n (a
                        # recovered lease, say) must not undo what attempt n+1 recorded.
                        where += " AND %s <= %%s" % qn("attempts")
                    cursor.executemany("UPDATE %s SET %s WHERE %s" % (table, sets, where), rows)
            if attempts:
                JobAttempt.objects.using(using).bulk_create(attempts, batch_size=self.batch)


def _adapters(conn: Any) -> dict[str, Callable[[Any], Any]]:
    """One value adapter per column for ``conn``, decided once per flush."""
    adapt_dt = conn.ops.adapt_datetimefield_value
    sqlite_utc = conn.vendor == "sqlite" and conn.timezone_name == "UTC"

    def json_value(value: Any) -> Any:
        return None if value is None else json.dumps(value)

    def text(value: Any) -> Any:
        return None if value is None else str(value)  # TextChoices members are str subclasses

    def moment(value: datetime | None) -> Any:
        if value is None:
            return None
        if sqlite_utc and value.tzinfo is UTC:
            return str(value.replace(tzinfo=None))  # what the adapter returns, 5x faster
        return adapt_dt(value)

    def plain(value: Any) -> Any:
        return value

    out: dict[str, Callable[[Any], Any]] = {c: plain for c in COLUMNS}
    out.update({c: text for c in ("status", "worker_id", "last_error", "traceback")})
    out.update({c: moment for c in _DATETIMES})
    out.update({c: json_value for c in _JSON})
    return out
