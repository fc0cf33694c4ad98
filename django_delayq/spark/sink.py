"""Write one batch of ``JobColumns``: audit rows first (one transaction), then Redis.

Like ``schedule_many``: the rows are committed before the jobs reach Redis, so a crash
in between leaves rows the reconciler enqueues; if Redis is down the rows stay in the
outbox. Keyed rows that already exist are neither inserted nor enqueued again, and so
are the rows a retried Spark task's failed attempt committed: their ids derive from the
call and the row's place (``batch_ids.ids_for_rows``), and when a partition's first such
id is stored already, every batch of the task takes the keyed path.

- PostgreSQL (psycopg 3): the rows are streamed as one COPY text built column-wise by
  pyarrow; with keys, through a temporary table and ``INSERT … ON CONFLICT DO NOTHING
  RETURNING id``, which names exactly the new rows.
- SQLite and other backends: one ``executemany`` binding only the varying columns;
  with keys, the existing ids are looked up first and ``INSERT OR IGNORE`` covers a
  concurrent writer.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from django.conf import settings as django_settings
from django.db import transaction
from django.utils import timezone

from django_delayq import signals
from django_delayq.core import row_insert
from django_delayq.core.api import enqueue_or_outbox
from django_delayq.engine.outcomes import NewJob
from django_delayq.spark.column_rows import COPY_ESCAPES, ColumnWriter, text_datetimes

if TYPE_CHECKING:
    from django_delayq.spark.arrow_jobs import JobColumns, Target


def _run_at_text(cols: JobColumns, mode: str) -> pa.Array:
    text = pc.cast(pc.cast(cols.run_at_us, pa.timestamp("us")), pa.string())  # naive UTC
    if mode == "copy":
        return pc.binary_join_element_wise(text, "+00:00", "")
    if (np.asarray(cols.run_at_us) % 1_000_000 == 0).any():  # str(datetime) writes no .000000
        text = pc.replace_substring_regex(text, r"\.000000$", "")
    return text


def _run_at_objects(cols: JobColumns, writer: ColumnWriter) -> list[Any]:
    moments = pc.cast(cols.run_at_us, pa.timestamp("us", tz="UTC")).to_pylist()
    if not django_settings.USE_TZ:
        moments = [timezone.make_naive(m) for m in moments]
    return [writer.adapt(m) for m in moments]


def _escape(text: pa.Array) -> pa.Array:
    for char, escaped in COPY_ESCAPES:
        text = pc.replace_substring(text, char, escaped)
    return text


def _copy_payload(cols: JobColumns, writer: ColumnWriter) -> str:
    """Every row as a line of COPY text, in the table's column order."""
    n = len(cols.ids)
    varying: dict[str, Any] = {
        "id": pa.array(cols.ids, pa.string()),
        "key": "\\N" if cols.keys is None else pc.fill_null(_escape(cols.keys), "\\N"),
        "args": pc.replace_substring(cols.args, "\\", "\\\\"),
        "kwargs": pc.replace_substring(cols.kwargs, "\\", "\\\\"),
        "run_at": _run_at_text(cols, "copy")}
    pieces: list[Any] = []
    for field, constant in zip(writer.fields, writer.copy_layout(), strict=True):
        pieces += [varying[field.attname] if constant is None else constant, "\t"]
    pieces[-1] = "\n"
    lines = pc.binary_join_element_wise(*pieces, "")  # an array: the ids vary
    whole = pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), lines)
    return str(pc.binary_join(whole, "")[0].as_py())


def _prepare(cols: JobColumns, writer: ColumnWriter, mode: str | None,
             batch_size: int) -> Callable[[], JobColumns]:
    """Build the statement or COPY text, outside the transaction; the returned function
    inserts the rows and returns the jobs to enqueue (the new ones)."""
    if mode == "copy":
        payload = _copy_payload(cols, writer)

        def copy() -> JobColumns:
            new = writer.copy_text(payload, new_only=cols.keyed)
            return cols if new is None else cols.keep(set(new), inside=True)

        return copy
    run_at = _run_at_text(cols, mode).to_pylist() if mode else _run_at_objects(cols, writer)
    columns = {"id": cols.ids, "args": cols.args.to_pylist(), "kwargs": cols.kwargs.to_pylist(),
               "key": [None] * len(cols.ids) if cols.keys is None else cols.keys.to_pylist(),
               "run_at": run_at}
    prepared = writer.prepare_columns(columns, ignore_conflicts=cols.keyed)

    def insert() -> JobColumns:
        writer.insert_prepared(prepared, batch_size)
        return cols

    return insert


def _enqueue(queue: str, cols: JobColumns) -> None:
    n = len(cols.ids)
    at_ms = cols.at_ms or [None] * n
    delay_ms = cols.delay_ms or [0] * n
    enqueue_or_outbox(queue, [NewJob(id=i, at_ms=a, delay_ms=d)  # the payload: the row
                               for i, a, d in zip(cols.ids, at_ms, delay_ms, strict=True)])


def _commit(t: Target, cols: JobColumns, *, using: str, now: datetime,
            batch_size: int) -> JobColumns:
    """Insert and commit the audit rows of ``cols``; return the jobs to enqueue."""
    writer = ColumnWriter(using, t.job.columns(), now=now)
    mode = text_datetimes(using)
    if cols.keyed and mode != "copy":
        existing = writer.existing(cols.ids)
        if existing:
            cols = cols.keep(existing, inside=False)
    if not cols.ids:
        return cols
    insert = _prepare(cols, writer, mode, batch_size)
    with transaction.atomic(using=using):
        new = insert()
        if new.ids:
            signals.send(signals.jobs_scheduled, queue=t.job.queue, callable_path=t.job.path,
                         job_ids=list(new.ids))
        return new


class Sink:
    """Writes the batches of one partition: each batch's rows are committed, then its
    jobs go to Redis on a helper thread while the next batch's rows are inserted (the
    database driver and the Redis socket both release the GIL). At most one batch
    waits for Redis; ``close`` (or leaving the ``with`` block) waits for it."""

    def __init__(self, target: Target, *, using: str, batch_size: int) -> None:
        self.target, self.using, self.batch_size = target, using, batch_size
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delayq-enqueue")
        self._pending: Future[None] | None = None
        self._retry: bool | None = None  # a retried task's: rows may exist (None: unknown)

    def write(self, cols: JobColumns, now: datetime) -> None:
        if self._retry is None and cols.own_first is not None:
            # the partition's first row whose id the call made (not a key) is stored: an
            # earlier attempt of this Spark task committed batches, which are skipped
            self._retry = bool(row_insert.existing(self.using, [cols.own_first]))
        if self._retry and not cols.keyed:
            cols = replace(cols, keyed=True)
        new = _commit(self.target, cols, using=self.using, now=now, batch_size=self.batch_size)
        if new.ids:  # at once, unless an outer transaction is still open
            transaction.on_commit(lambda: self._submit(new), using=self.using)

    def _submit(self, new: JobColumns) -> None:
        self._wait()
        self._pending = self._pool.submit(_enqueue, self.target.job.queue, new)

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        try:
            self._wait()
        finally:
            self._pool.shutdown()

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
