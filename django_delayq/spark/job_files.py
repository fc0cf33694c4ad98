"""The job files of one ``delayq_export`` run: its window's rows in keyset pages, and the
rows of the jobs its attempt rows belong to.

Every row written carries ``read_at``, the time just before the query that read it, so
readers keep per id the version read last (``export``). The columns are the audit row's
(``schema.JOB_COLUMNS``) but those excluded, with the redacted ones replaced.

``by_id`` writes the current rows of jobs named by id: ``export_attempts`` asks for the
jobs of the attempt rows it writes whose job changed lately (the window may not hold
them: a job that failed inside the settle window is left to the next run), so that every
attempt row exported has its job row in the export (``export_attempts`` says why the
others are there already).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from django.db.models import Q, QuerySet
from django.utils import timezone

from django_delayq.models import Job
from django_delayq.spark import schema
from django_delayq.spark.writer import DayPartitionedWriter

if TYPE_CHECKING:
    from django_delayq.spark.progress_bar import Progress

BY_ID = 1000  # ids per query of ``by_id`` (SQLite binds at most 32,766 values)


def keyset_pages(qs: QuerySet[Any], columns: tuple[str, ...], chunk_size: int,
                 order: tuple[str, str] = ("created_at", "id")) -> Iterator[list[tuple[Any, ...]]]:
    """Pages of ``values_list(*columns)`` ordered by ``order``, each one query, O(chunk) memory."""
    first, second = order
    i, j = columns.index(first), columns.index(second)
    qs = qs.order_by(first, second)
    after: tuple[Any, Any] | None = None
    while True:
        page_qs = qs
        if after is not None:
            page_qs = qs.filter(Q(**{first + "__gt": after[0]})
                                | Q(**{first: after[0], second + "__gt": after[1]}))
        page = list(page_qs.values_list(*columns)[:chunk_size])
        if not page:
            return
        yield page
        after = (page[-1][i], page[-1][j])


class JobFiles:
    """Writes job rows to ``root/jobs`` (one ``DayPartitionedWriter``), counting them on
    ``bar``; use it with ``with`` (closed on success, aborted on an error)."""

    def __init__(self, root: Path, excluded: tuple[str, ...], redacted: tuple[str, ...],
                 bar: Progress, recent_after: datetime | None = None) -> None:
        self.columns = tuple(c for c in schema.JOB_COLUMNS if c not in excluded)
        self.schema = pa.schema([*(schema.JOB_SCHEMA.field(c) for c in self.columns),
                                 pa.field("read_at", schema.TS)])
        self.positions = tuple(self.columns.index(c) for c in redacted)
        self.writer = DayPartitionedWriter(root / schema.JOBS_DIR, self.schema, kind="export",
                                           day_column="created_at")
        self.bar = bar
        # the ids written whose row changed after ``recent_after``: the only ones ``by_id``
        # may be asked for, so each job is written at most once in a run, in memory bounded
        # by the jobs changed lately, not by the run
        self.recent_after = recent_after
        self.written: set[str] = set()
        self.changed_at = self.columns.index("updated_at")

    def __enter__(self) -> JobFiles:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.writer.__exit__(exc_type, exc, tb)

    def _write(self, page: list[tuple[Any, ...]], read_at: datetime) -> None:
        if self.recent_after is not None:
            self.written.update(row[0] for row in page if row[self.changed_at] > self.recent_after)
        table = schema.to_table(schema.redacted(page, self.positions),
                                self.schema.remove(len(self.schema) - 1), schema.JOB_JSON_FIELDS)
        self.writer.write(table.append_column(self.schema.field("read_at"),
                                              pa.array([read_at] * len(page), type=schema.TS)))

    def write(self, qs: QuerySet[Job], chunk_size: int) -> None:
        """The rows of ``qs`` in keyset pages, each stamped with the time before its query."""
        pages = keyset_pages(qs, self.columns, chunk_size)
        while True:
            read_at = timezone.now()
            page = next(pages, None)
            if page is None:
                return
            self._write(page, read_at)
            self.bar.update(len(page))

    def by_id(self, ids: Sequence[str]) -> set[str]:
        """Write the rows of the jobs ``ids`` as they are now; the ids found (a job deleted
        meanwhile is gone with its attempt rows). A job this run has written already (its
        window held it, or an earlier call) is not written again."""
        found = {i for i in ids if i in self.written}
        ids = [i for i in ids if i not in found]
        for start in range(0, len(ids), BY_ID):
            read_at = timezone.now()
            page = list(Job.objects.filter(pk__in=ids[start:start + BY_ID])
                        .values_list(*self.columns))
            if page:
                self._write(page, read_at)
                self.bar.total += len(page)  # not counted at the start: found on the way
                self.bar.update(len(page))
                found.update(row[0] for row in page)
                self.written.update(row[0] for row in page)
        return found
