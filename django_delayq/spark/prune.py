"""Archive finished audit rows to Parquet, then delete them in batches.

A batch is: read up to ``batch_size`` finished jobs (succeeded, dead, cancelled, expired;
``finished_at`` before the cutoff) in ``(created_at, id)`` order, write them and their
``JobAttempt`` rows to the archive, publish the files, and only then delete both, with the
jobs' ``JobDependency`` edges (as parent and as child), in one transaction
(``worker.retention.delete_jobs``). A crash between the two leaves the rows in the table,
to be archived again by the next run (the same version twice; readers deduplicate by id).

Archived jobs come with all their attempt rows, so a directory that holds archives only
(no export state) gets the marker that lets the report count failed attempts
(``export_attempts.mark_complete``); in an export directory the export decides.

Each run's files are listed in one record (``records``), rewritten after each batch
before its rows are deleted, naming the database; archiving into a directory whose state
or records name another database is refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TextIO

import pyarrow as pa
from django.db.models import QuerySet
from django.utils import timezone

from django_delayq.models import FINAL_STATUSES, Job, JobAttempt
from django_delayq.spark import export_attempts, records, schema
from django_delayq.spark.export import STATE_FILE, check_database, database_identity
from django_delayq.spark.preflight import writable_dir
from django_delayq.spark.progress_bar import Progress
from django_delayq.spark.writer import DayPartitionedWriter
from django_delayq.worker.retention import delete_jobs

DEFAULT_BATCH = 2000
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_age(text: str) -> timedelta:
    """``"30d"``, ``"12h"``, ``"90m"``, ``"45s"``, ``"2w"`` -> timedelta."""
    match = _AGE.match(text)
    if not match:
        raise ValueError("age %r is not a number followed by one of s, m, h, d, w "
                         "(for example 30d or 12h)" % (text,))
    return timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneResult:
    cutoff: datetime
    jobs: int
    attempts: int
    files: list[Path] = field(default_factory=list)


def prunable(cutoff: datetime) -> QuerySet[Job]:
    return Job.objects.filter(status__in=FINAL_STATUSES, finished_at__lt=cutoff)


def _delete(ids: list[str]) -> int:
    """The jobs with their attempt rows and their workflow edges (as parent and as
    child), in one transaction: ``worker.retention.delete_jobs``."""
    return delete_jobs(ids)[1]


def prune_jobs(older_than: timedelta, *, archive: Path | str | None = None,
               batch_size: int = DEFAULT_BATCH, now: datetime | None = None,
               dry_run: bool = False, progress: bool = True,
               stream: TextIO | None = None) -> PruneResult:
    cutoff = (now or timezone.now()) - older_than
    qs = prunable(cutoff).order_by("created_at", "id")
    total = qs.count()
    if dry_run:  # the attempt rows of exactly those jobs, counted in the database
        attempts = JobAttempt.objects.filter(job_id__in=prunable(cutoff).values("pk")).count()
        return PruneResult(cutoff=cutoff, jobs=total, attempts=attempts)
    run = None if archive is None else _Run(Path(archive))
    bar = Progress(total, "delayq_prune", stream=stream, enabled=progress)
    jobs = attempts = 0
    files: list[Path] = []
    while True:
        read_at = timezone.now()  # before the read: see export's read_at
        page = list(qs.values_list(*schema.JOB_COLUMNS)[:batch_size])
        if not page:
            break
        ids = [row[0] for row in page]
        if run is not None:
            files += _archive(run, page, ids, read_at)
        attempts += _delete(ids)
        jobs += len(ids)
        bar.update(len(ids))
    bar.close()
    return PruneResult(cutoff=cutoff, jobs=jobs, attempts=attempts, files=files)


class _Run:
    """One archiving run into ``root``: its database, checked against the directory's,
    and its record, rewritten with every batch's files."""

    def __init__(self, root: Path) -> None:
        self.root = writable_dir(root, "archive to")
        self.database = database_identity()
        check_database(root, self.database)
        records.adopt(root, self.database)  # files written before records existed
        self.name = records.new_name("archive")
        self.files: dict[Path, tuple[int, int | None]] = {}

    def record(self, *written: dict[Path, tuple[int, int | None]]) -> None:
        for files in written:
            self.files.update(files)
        records.write(self.root, self.name, writer="archive", database=self.database,
                      attempts_complete=True, files=records.written(self.root, self.files))


def _archive(run: _Run, page: list[tuple[object, ...]], ids: list[str],
             read_at: datetime) -> list[Path]:
    root = run.root
    created = {row[0]: row[schema.JOB_COLUMNS.index("created_at")] for row in page}
    table = schema.to_table(page, schema.JOB_SCHEMA, schema.JOB_JSON_FIELDS)
    table = table.append_column(pa.field("read_at", schema.TS),
                                pa.array([read_at] * len(page), type=schema.TS))
    with DayPartitionedWriter(root / schema.JOBS_DIR, table.schema, kind="archive",
                              day_column="created_at") as jobs:
        jobs.write(table)
    rows = list(JobAttempt.objects.filter(job_id__in=ids).order_by("job_id", "number")
                .values_list(*schema.ATTEMPT_COLUMNS))
    # attempts are partitioned by their job's day, so a job and its attempts sit together
    table = schema.to_table(rows, schema.ATTEMPT_SCHEMA)
    if rows:
        days = pa.array([created[r[1]] for r in rows], type=schema.TS)
        table = table.append_column(schema.ATTEMPT_DAY, days)
    with DayPartitionedWriter(root / schema.ATTEMPTS_DIR, table.schema, kind="archive",
                              day_column=schema.ATTEMPT_DAY, max_column="id") as attempts:
        attempts.write(table)
    run.record(jobs.written, attempts.written)  # before the rows go
    if not os.path.lexists(root / STATE_FILE):  # archives only: every job with its attempts
        export_attempts.mark_complete(root)
    return jobs.files + attempts.files
