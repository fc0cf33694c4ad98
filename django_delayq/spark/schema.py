"""The Parquet layout of exported and archived audit rows.

``ROOT/jobs/day=YYYY-MM-DD/*.parquet`` (day of ``created_at``, UTC) holds job rows;
``ROOT/attempts/day=YYYY-MM-DD/*.parquet`` holds ``JobAttempt`` rows, exported by
``delayq_export`` and archived by ``delayq_prune``, partitioned by their job's day (one
more column, ``job_created_at``) so a job and its attempts sit together. Files are
append-only: a job row exported again after it changed is a newer version of the same
``id``. Exported and archived job rows carry one more column, ``read_at`` (when the
query that read them started), and readers keep per id the version read last, then the
latest ``updated_at`` (see ``source.read_jobs``); an attempt row never changes, so a copy
read twice is the same row. Job files hold every column of the audit row; JSON fields
are stored as JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from django_delayq.spark import preflight

TS = pa.timestamp("us", tz="UTC")

JOB_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("id", pa.string()),
    ("queue", pa.string()),
    ("callable_path", pa.string()),
    ("args", pa.string()),
    ("kwargs", pa.string()),
    ("key", pa.string()),
    ("status", pa.string()),
    ("run_at", TS),
    ("created_at", TS),
    ("updated_at", TS),
    ("started_at", TS),
    ("finished_at", TS),
    ("attempts", pa.int32()),
    ("max_attempts", pa.int32()),
    ("backoff", pa.string()),
    ("error_type", pa.string()),
    ("last_error", pa.string()),
    ("traceback", pa.string()),
    ("worker_id", pa.string()),
    ("result", pa.string()),
    ("cancel_requested", pa.bool_()),
    ("priority", pa.int16()),
    ("timeout", pa.float64()),
    ("expires_at", TS),
    ("retry_on", pa.string()),
    ("scheduled_for", TS),
    ("requeued_from", pa.string()),
    ("progress", pa.string()),
    ("task_backend", pa.string()),
    ("parents_left", pa.int32()),
    ("group", pa.string()),
    ("atomic", pa.bool_()),
)  # every column of the audit row (``Job``), in the model's order
JOB_JSON_FIELDS = frozenset({"args", "kwargs", "backoff", "result", "retry_on", "progress"})

ATTEMPT_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("id", pa.int64()),
    ("job_id", pa.string()),
    ("number", pa.int32()),
    ("outcome", pa.string()),
    ("started_at", TS),
    ("finished_at", TS),
    ("error_type", pa.string()),
    ("error", pa.string()),
    ("traceback", pa.string()),
    ("worker_id", pa.string()),
)

JOB_SCHEMA = pa.schema([pa.field(n, t) for n, t in JOB_FIELDS])
ATTEMPT_SCHEMA = pa.schema([pa.field(n, t) for n, t in ATTEMPT_FIELDS])
JOB_COLUMNS = tuple(n for n, _ in JOB_FIELDS)
ATTEMPT_COLUMNS = tuple(n for n, _ in ATTEMPT_FIELDS)
JOBS_DIR = preflight.JOBS_DIR
ATTEMPTS_DIR = preflight.ATTEMPTS_DIR
ATTEMPT_DAY = "job_created_at"  # the partition column of attempt files: their job's day
REDACTED = "[redacted]"


def _json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), sort_keys=True)


def to_table(
    rows: Sequence[Sequence[Any]], schema: pa.Schema, json_fields: frozenset[str] = frozenset()
) -> pa.Table:
    """Rows (tuples in ``schema`` order, as from ``values_list``) -> an Arrow table."""
    arrays = []
    for i, field in enumerate(schema):
        values = [row[i] for row in rows]
        if field.name in json_fields:
            values = [_json_or_none(v) for v in values]
        arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def redacted(rows: list[tuple[Any, ...]], positions: tuple[int, ...]) -> list[tuple[Any, ...]]:
    """``rows`` with the values at ``positions`` replaced by ``REDACTED``, but for null and
    the empty string (a redacted column still says whether a value was there)."""
    if not positions:
        return rows
    out = []
    for row in rows:
        values = list(row)
        for i in positions:
            if values[i] is not None and values[i] != "":
                values[i] = REDACTED
        out.append(tuple(values))
    return out


def day_of(value: datetime) -> str:
    """The partition a row goes to: the UTC day of its ``created_at``."""
    return value.astimezone(UTC).strftime("%Y-%m-%d")
