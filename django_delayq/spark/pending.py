"""The rows an incremental export must look at again, whatever their ``updated_at`` says.

``updated_at`` is stamped by the writer, not by the commit: a worker stamps its own
start or finish time and writes it later, in buffered batches it retries while the
database is locked, and its clock may run behind. Such a write can commit after an
export has passed its ``updated_at``, and a window on ``updated_at`` alone would miss it
for ever (the row stays ``scheduled`` in Parquet).

A worker writes only rows it claimed, and it claims only jobs that are due. So each
export records, before it reads anything, every row that is live (scheduled, running,
retrying) and due by ``now + overlap``: its id, status, attempts and ``updated_at``.
The next export reads those rows again by id and exports each whose status, attempts
or ``updated_at`` changed, whatever its new ``updated_at``. The argument (also in
docs/pipeline.md) is that any change committed after an export's read is one of:

- a change to a row recorded here: found by id, however old its stamp;
- a change to a live row not yet due by ``now + overlap``: claimed after it is due, so
  stamped after ``now + overlap - skew``, inside the next run's window when the clock
  difference between writers (``skew``) is under the overlap;
- a new row, or a change to a final row (an admin action), written outside the worker
  in one short transaction: stamped less than the overlap before it commits, so inside
  the next window (which starts ``overlap`` before the last mark).

The record is a Parquet file named after the run, published before the state file that
names it; a failed run leaves the previous state, and its record, in force.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from django_delayq.models import LIVE_STATUSES, Job
from django_delayq.spark.schema import TS

PREFIX = "_delayq_export_pending-"
FIELDS = ("id", "status", "attempts", "updated_at")
SCHEMA = pa.schema([("id", pa.string()), ("status", pa.string()), ("attempts", pa.int32()),
                    ("updated_at", TS)])
CHUNK = 1000


def capture(horizon: datetime) -> pa.Table:
    """Every live row due by ``horizon``, as it is now (uses the (status, run_at) index)."""
    rows = Job.objects.filter(status__in=LIVE_STATUSES, run_at__lte=horizon)
    columns: list[list[object]] = [[] for _ in FIELDS]
    for row in rows.values_list(*FIELDS).iterator(chunk_size=5000):
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, SCHEMA)],
                                schema=SCHEMA)


def write(root: Path, table: pa.Table) -> str:
    """Publish the record under a new name (written aside, then renamed); return it."""
    name = "%s%s.parquet" % (PREFIX, uuid.uuid4().hex)
    tmp = root / (".%s.tmp" % name)
    pq.write_table(table, tmp)
    tmp.replace(root / name)
    return name


def is_name(name: object) -> bool:
    """Whether ``name`` is one ``write`` gives (no path, no other file)."""
    return isinstance(name, str) and re.fullmatch(re.escape(PREFIX) + r"[0-9a-f]{32}\.parquet",
                                                  name) is not None


def read(root: Path, name: str | None) -> pa.Table | None:
    if not name or not is_name(name):
        return None
    path = root / name
    return pq.read_table(path) if path.is_file() and not path.is_symlink() else None


def remove_others(root: Path, keep: str) -> None:
    for path in root.glob(PREFIX + "*.parquet"):
        if path.name != keep:
            path.unlink(missing_ok=True)


def changed(recorded: pa.Table | None) -> Iterator[str]:
    """Ids of recorded rows whose status, attempts or ``updated_at`` is no longer the
    recorded one (deleted rows are gone, not changed)."""
    if recorded is None or recorded.num_rows == 0:
        return
    ids = recorded.column("id").to_pylist()
    before = dict(zip(ids, zip(recorded.column("status").to_pylist(),
                               recorded.column("attempts").to_pylist(),
                               recorded.column("updated_at").to_pylist(), strict=True),
                      strict=True))
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start:start + CHUNK]
        for job_id, *now in Job.objects.filter(pk__in=chunk).values_list(*FIELDS):
            if tuple(now) != before[job_id]:
                yield job_id
