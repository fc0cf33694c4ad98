"""Fast bulk insert of audit rows: one ``executemany`` INSERT, no model instances.

``bulk_create`` spends most of its time compiling SQL per row and value; for
``schedule_many`` (thousands of rows a second) each value is encoded once with the
backend's own adapters and the driver runs one prepared statement per batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models.constants import OnConflict

from django_delayq.models import Job, JobStatus

_VARYING = ("id", "key", "args", "kwargs", "run_at")


def datetime_adapter(using: str) -> Callable[[datetime | None], Any]:
    """The backend's datetime adapter, with SQLite's UTC case done directly (5x faster)."""
    conn = connections[using]
    fast = conn.vendor == "sqlite" and conn.timezone_name == "UTC"
    adapt = conn.ops.adapt_datetimefield_value

    def adapter(value: datetime | None) -> Any:
        if value is None:
            return None
        if fast and value.tzinfo is UTC:
            return str(value.replace(tzinfo=None))
        return adapt(value)

    return adapter


def _has_copy(conn: Any) -> bool:
    conn.ensure_connection()
    return hasattr(conn.connection, "pipeline")  # psycopg 3: cursor.copy() streams rows


class RowWriter:
    """Builds INSERT parameter rows for one queue and callable, and inserts them."""

    def __init__(self, using: str, *, queue: str, path: str, max_attempts: int, backoff: Any,
                 now: datetime) -> None:
        self.using = using
        self.fields = list(Job._meta.concrete_fields)
        names = [f.attname for f in self.fields]
        adapt = datetime_adapter(using)
        const: dict[str, Any] = {
            "queue": queue, "callable_path": path, "status": JobStatus.SCHEDULED.value,
            "created_at": adapt(now), "updated_at": adapt(now), "started_at": None,
            "finished_at": None, "attempts": 0, "max_attempts": max_attempts,
            "backoff": None if backoff is None else json.dumps(backoff), "last_error": "",
            "traceback": "", "worker_id": "", "result": None, "cancel_requested": False}
        missing = set(names) - set(const) - set(_VARYING)
        if missing:
            raise RuntimeError("RowWriter does not know the Job columns %s" % sorted(missing))
        self.template = [const.get(name) for name in names]
        self.slots = tuple(names.index(name) for name in _VARYING)
        self.adapt = adapt

    def row(self, job_id: str, key: str | None, args_json: str, kwargs_json: str,
            run_at: datetime) -> list[Any]:
        values = self.template.copy()
        i_id, i_key, i_args, i_kwargs, i_run = self.slots
        values[i_id], values[i_key], values[i_args] = job_id, key, args_json
        values[i_kwargs], values[i_run] = kwargs_json, self.adapt(run_at)
        return values

    def insert(self, rows: Sequence[list[Any]], *, ignore_conflicts: bool,
               batch_size: int = 1000) -> None:
        if not rows:
            return
        conn = connections[self.using]
        if conn.vendor == "postgresql" and not ignore_conflicts and _has_copy(conn):
            self._copy(conn, rows)
            return
        ops = conn.ops
        on_conflict = OnConflict.IGNORE if ignore_conflicts else None
        sql = "%s %s (%s) VALUES (%s) %s" % (
            ops.insert_statement(on_conflict=on_conflict), ops.quote_name(Job._meta.db_table),
            ", ".join(ops.quote_name(str(f.column)) for f in self.fields),
            ", ".join(["%s"] * len(self.fields)),
            ops.on_conflict_suffix_sql(self.fields, on_conflict, None, None))
        with conn.cursor() as cursor:
            for i in range(0, len(rows), batch_size):
                cursor.executemany(sql, rows[i:i + batch_size])

    def _copy(self, conn: Any, rows: Sequence[list[Any]]) -> None:
        """PostgreSQL: stream the rows with COPY (several times faster than INSERTs)."""
        ops = conn.ops
        sql = "COPY %s (%s) FROM STDIN" % (
            ops.quote_name(Job._meta.db_table),
            ", ".join(ops.quote_name(str(f.column)) for f in self.fields))
        with conn.cursor() as wrapper:
            with wrapper.cursor.copy(sql) as copy:
                for row in rows:
                    copy.write_row(row)
