"""The Parquet layout of exported and archived audit rows.

``ROOT/jobs/day=YYYY-MM-DD/*.parquet`` (day of ``created_at``, UTC) holds job rows;
``ROOT/attempts/day=YYYY-MM-DD/*.parquet`` holds ``JobAttempt`` rows archived by
``delayq_prune``. Files are append-only: a row exported again after it changed is a
newer version of the same ``id``. Exported and archived job rows carry one more column,
``read_at`` (when the query that read them started), and readers keep per id the
version read last, then the latest ``updated_at`` (see ``source.read_jobs``). JSON
fields are stored as JSON text.
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
)
JOB_JSON_FIELDS = frozenset({"args", "kwargs", "backoff", "result"})

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
ATTEMPTS_DIR = "attempts"


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


def day_of(value: datetime) -> str:
    """The partition a row goes to: the UTC day of its ``created_at``."""
    return value.astimezone(UTC).strftime("%Y-%m-%d")
