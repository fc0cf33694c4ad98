"""Fast bulk insert of audit rows: one ``executemany`` INSERT, no model instances.

``bulk_create`` spends most of its time compiling SQL per row and value; for
``schedule_many`` (thousands of rows a second) we adapt each value once, using the
backend's own adapters, and let the driver run one prepared statement.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models.constants import OnConflict

from django_delayq.models import Job, JobStatus


def _json(value: Any) -> str:
    if not value:
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def insert_jobs(using: str, rows: Sequence[dict[str, Any]], *, ignore_conflicts: bool,
                batch_size: int = 1000) -> None:
    """Insert ``rows`` (dicts of Job field names -> Python values) into the Job table."""
    if not rows:
        return
    conn = connections[using]
    ops = conn.ops
    fields = [f for f in Job._meta.concrete_fields]
    defaults = {"status": JobStatus.SCHEDULED.value, "attempts": 0, "last_error": "",
                "traceback": "", "worker_id": "", "result": None, "cancel_requested": False,
                "started_at": None, "finished_at": None, "key": None, "backoff": None}
    adapters = []
    for f in fields:
        internal = f.get_internal_type()
        if internal == "JSONField":
            adapters.append(lambda v: None if v is None else _json(v))
        elif internal == "DateTimeField":
            adapters.append(_datetime_adapter(ops))
        else:
            adapters.append(lambda v: v)
    columns = ", ".join(ops.quote_name(str(f.column)) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    on_conflict = OnConflict.IGNORE if ignore_conflicts else None
    sql = "%s %s (%s) VALUES (%s) %s" % (
        ops.insert_statement(on_conflict=on_conflict), ops.quote_name(Job._meta.db_table),
        columns, marks, ops.on_conflict_suffix_sql(fields, on_conflict, None, None))
    names = [f.attname for f in fields]
    params = []
    for row in rows:
        params.append([adapt(row[name] if name in row else defaults[name])
                       for name, adapt in zip(names, adapters)])
    with conn.cursor() as cursor:
        for i in range(0, len(params), batch_size):
            cursor.executemany(sql, params[i:i + batch_size])


def _datetime_adapter(ops: Any) -> Any:
    last: list[Any] = [None, None]  # rows share created_at/updated_at: adapt it once

    def adapt(value: datetime | None) -> Any:
        if value is None:
            return None
        if value is not last[0]:
            last[0], last[1] = value, ops.adapt_datetimefield_value(value)
        return last[1]

    return adapt


def row_values(*, id: str, queue: str, path: str, args: list[Any], kwargs: dict[str, Any],
               key: str | None, run_at: datetime, now: datetime, max_attempts: int,
               backoff: Any) -> dict[str, Any]:
    return {"id": id, "queue": queue, "callable_path": path, "args": args, "kwargs": kwargs,
            "key": key, "run_at": run_at, "created_at": now, "updated_at": now,
            "max_attempts": max_attempts, "backoff": backoff}
