"""Stream audit rows to day-partitioned Parquet, incrementally, in bounded memory.

The rows exported by one run are those whose ``updated_at`` lies in
``(high-water mark of the last run, now - settle]`` (and whose ``created_at`` lies in
``[since, until)`` when given). They are read in keyset pages of ``(created_at, id)``,
never the whole table. The state file ``ROOT/_delayq_export_state.json`` keeps the mark;
it is written only after every file of the run is in place, so a failed run is simply
run again (rows exported twice are the same version and readers deduplicate them).

``settle`` leaves rows updated in the last seconds to the next run, so a transaction
still open while the export reads is not skipped forever.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from django.db.models import Q, QuerySet
from django.utils import timezone

from django_delayq.models import Job
from django_delayq.spark import schema
from django_delayq.spark.progress import Progress
from django_delayq.spark.writer import DayPartitionedWriter

STATE_FILE = "_delayq_export_state.json"
DEFAULT_CHUNK = 5000


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportResult:
    rows: int
    files: list[Path] = field(default_factory=list)
    previous_mark: datetime | None = None
    mark: datetime


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _parse(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def read_state(root: Path) -> dict[str, Any] | None:
    path = Path(root) / STATE_FILE
    if not path.exists():
        return None
    return dict(json.loads(path.read_text()))


def _write_state(root: Path, state: dict[str, Any]) -> None:
    path = Path(root) / STATE_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
    os.replace(tmp, path)


def _previous_mark(state: dict[str, Any] | None, since: datetime | None,
                   until: datetime | None, full: bool) -> datetime | None:
    if state is None or full:
        return None
    if (state.get("since"), state.get("until")) != (_iso(since), _iso(until)):
        raise ValueError(
            "this directory was exported with --since %s --until %s; use the same range, "
            "another directory, or a full export" % (state.get("since"), state.get("until")))
    return _parse(state["high_water"])


def rows_to_export(previous_mark: datetime | None, mark: datetime,
                   since: datetime | None, until: datetime | None) -> QuerySet[Job]:
    qs = Job.objects.filter(updated_at__lte=mark)
    if previous_mark is not None:
        qs = qs.filter(updated_at__gt=previous_mark)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    return qs


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


def export_jobs(root: Path | str, *, since: datetime | None = None,
                until: datetime | None = None, full: bool = False,
                chunk_size: int = DEFAULT_CHUNK, settle: timedelta = timedelta(seconds=2),
                now: datetime | None = None, progress: bool = True,
                stream: TextIO | None = None) -> ExportResult:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    state = read_state(root)
    previous = _previous_mark(state, since, until, full)
    mark = (now or timezone.now()) - settle
    if previous is not None and mark < previous:
        mark = previous
    qs = rows_to_export(previous, mark, since, until)
    bar = Progress(qs.count(), "delayq_export", stream=stream, enabled=progress)
    with DayPartitionedWriter(root / schema.JOBS_DIR, schema.JOB_SCHEMA, kind="export",
                              day_column="created_at") as writer:
        for page in keyset_pages(qs, schema.JOB_COLUMNS, chunk_size):
            writer.write(schema.to_table(page, schema.JOB_SCHEMA, schema.JOB_JSON_FIELDS))
            bar.update(len(page))
    bar.close()
    runs = (state or {}).get("runs", 0) + 1
    _write_state(root, {"version": 1, "high_water": _iso(mark), "since": _iso(since),
                        "until": _iso(until), "runs": runs, "last_run_rows": writer.rows})
    return ExportResult(rows=writer.rows, files=writer.files, previous_mark=previous, mark=mark)
