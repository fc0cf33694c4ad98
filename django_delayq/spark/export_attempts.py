"""The attempt rows (``JobAttempt``) of an export, incrementally, by id.

An attempt row is inserted once and never changed. Its stamps (``finished_at``) are the
writer's, like a job's ``updated_at``: written late (buffered, retried while the
database is locked) and by clocks that may run behind; and a worker that lost a race
inserts its attempt row without changing its job row (which already records a later
attempt, or is final), so no change of a job announces it. So attempt rows are read by
``id``, which the database hands out in increasing order and never reuses
(PostgreSQL's sequences, SQLite's AUTOINCREMENT), in keyset pages:

- each run takes the highest committed id (``upper``) in one query, noting the time
  just before (``before``) and just after it (``after``), and reads the ids in
  ``(lower, upper]``;
- a transaction that inserts attempt rows commits within ``overlap`` of inserting them
  (the export's overlap: it also bounds the transactions of ``schedule()`` and the
  admin). A row committed after a run's query was inserted after that run's
  ``before - overlap``, so after the query of every run whose ``after`` is earlier,
  and its id is above those runs' ``upper``. The next run's ``lower`` is the highest
  such ``upper``; the runs within ``overlap`` of a directory's first run (and the
  second run, whenever it comes) read every attempt row again.

On SQLite the write lock makes id order commit order and the overlap only costs the
re-read. Rows read twice are the same row; readers keep one per id.

Every attempt row written has its job row in the export. The attempt query reads each
row's job ``updated_at`` with it (one statement, one snapshot). A job changed after the
run's mark minus the overlap may not be in this run's window (it failed inside
``settle``: left to the next run), so its row is written with its attempt rows, read by
id just after (``job_files.JobFiles.by_id``; an attempt row whose job is gone by then,
deleted with it, is left out). Any other job was last changed at or before the mark
minus the overlap, and its row existed before the attempt row (a job row is committed
before any attempt of it), so before ``upper`` and before the job rows were read: the
version that read saw is in this run's window or an earlier run's, or it was stamped
after the mark, and then the version read here, written later but stamped more than the
overlap earlier, would take clocks further apart than the export allows.

Files are partitioned by their job's day (``job_created_at``, like ``delayq_prune``'s
archive), and ``--since``/``--until`` select by the job's ``created_at``. The jobs'
``--exclude``/``--redact`` choice covers the attempt columns of the same name
(``error_type``, ``traceback``, ``worker_id``, ``started_at``, ``finished_at``), and
``error`` follows ``last_error`` (the same message).

The marker ``preflight.ATTEMPTS_MARKER`` tells the report that every job row of the
directory has its attempt rows there. Every run of a directory exported with attempt
rows since its first run writes it; a directory begun before attempt rows were exported
(its state has no ``attempts``) goes on without them: jobs it exported then may have
been deleted since, with their attempt rows.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from django.db import DatabaseError, connections, transaction
from django.db.models import Max, QuerySet

from django_delayq.models import JobAttempt
from django_delayq.spark import schema
from django_delayq.spark.preflight import ATTEMPTS_MARKER
from django_delayq.spark.writer import DayPartitionedWriter

if TYPE_CHECKING:
    from django_delayq.spark.progress_bar import Progress

STATE_KEY = "attempts"
MAX_MARKS = 64  # beyond, every other mark goes: an older mark only makes a run read more
_FROM_JOB = {"last_error": "error"}  # job column -> the attempt column its choice covers
_COVERED = frozenset(schema.ATTEMPT_COLUMNS) - {"id"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """The ids one run reads, ``(lower, upper]``, and when ``upper`` was taken."""

    lower: int
    upper: int
    before: datetime
    after: datetime
    floor: int  # the lowest ``lower`` any later run may use
    marks: tuple[tuple[str, int], ...]  # (after, upper) of recent runs, not yet folded in


def _bad(where: str, key: str, value: object, expected: str) -> ValueError:
    return ValueError("%s: %s is %s, not %s; fix the file, or export to a new directory"
                      % (where, key, json.dumps(value, default=str), expected))


def _id(where: str, key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(where, key, value, "an attempt id (an integer >= 0)")
    return value


def checked_when(where: str, key: str, value: object) -> datetime:
    """``value`` as an aware datetime, or a ValueError naming ``where``, ``key`` and it."""
    parsed = None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise _bad(where, key, value, "an ISO datetime with a time zone")
    return parsed


def check_state(part: object, where: str) -> None:
    """The attempts part of a state file (``where``): ids that are integers >= 0 and times
    that are ISO datetimes, or a ValueError naming the first value that is not. A mark
    read as anything else would make a run skip attempt rows, or read the wrong ones."""
    if part is None:
        return
    if not isinstance(part, dict):
        raise _bad(where, STATE_KEY, part, "an object (floor, before, marks)")
    _id(where, STATE_KEY + ".floor", part.get("floor", 0))
    if part.get("before") is not None:
        checked_when(where, STATE_KEY + ".before", part["before"])
    marks = part.get("marks", [])
    if not isinstance(marks, list):
        raise _bad(where, STATE_KEY + ".marks", marks, "a list of [time, id] pairs")
    for i, mark in enumerate(marks):
        key = "%s.marks[%d]" % (STATE_KEY, i)
        if not isinstance(mark, list) or len(mark) != 2:
            raise _bad(where, key, mark, "a [time, id] pair")
        checked_when(where, key + "[0]", mark[0])
        _id(where, key + "[1]", mark[1])


def highest_issued() -> int | None:
    """The highest attempt id the database has handed out, deleted rows' too (SQLite's
    ``sqlite_sequence``, PostgreSQL's sequence), never less than the highest id in the
    table; None where it cannot say (another database, a sequence it may not read)."""
    using = JobAttempt.objects.db
    conn, table = connections[using], JobAttempt._meta.db_table
    top = JobAttempt.objects.using(using).aggregate(top=Max("id"))["top"] or 0
    if conn.vendor == "sqlite":  # no transaction: BEGIN IMMEDIATE would take the write lock
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT seq FROM sqlite_sequence WHERE name = %s", [table])
                found = cursor.fetchone()
        except DatabaseError:  # no sqlite_sequence yet: nothing inserted
            return top
        return max(top, int(found[0]) if found else 0)
    if conn.vendor != "postgresql":
        return None
    try:
        with transaction.atomic(using=using), conn.cursor() as cursor:  # a savepoint
            sequences = conn.introspection.get_sequences(cursor, table)
            if not sequences:
                return None
            cursor.execute("SELECT last_value, is_called FROM %s"
                           % conn.ops.quote_name(sequences[0]["name"]))
            last, called = cursor.fetchone()
    except DatabaseError:  # a sequence this user may not read
        return None
    return max(top, int(last) if called else int(last) - 1)  # not called: last is the next


def check_issued(part: dict[str, Any] | None, where: str) -> None:
    """Every id of the attempts part of a state file (``where``) at most the highest
    attempt id the database has handed out (``highest_issued``): ``delayq_export`` writes
    none higher, and the next run would skip every attempt row up to it."""
    if not part:
        return
    named = [(STATE_KEY + ".floor", part.get("floor", 0))]
    named += [("%s.marks[%d][1]" % (STATE_KEY, i), mark[1])
              for i, mark in enumerate(part.get("marks", []))]
    if all(value == 0 for _, value in named) or (top := highest_issued()) is None:
        return
    for key, value in named:
        if value > top:
            raise ValueError("%s: %s is %d, above the highest attempt id this database has "
                             "handed out (%d): a run would skip every attempt row up to it; fix "
                             "the file, or export to a new directory" % (where, key, value, top))


def tracked(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """The attempts part of the export state: empty for a new directory, None for one
    begun before attempt rows were exported (they are not exported there)."""
    if state is None:
        return {}
    part = state.get(STATE_KEY)
    return None if part is None else dict(part)


def covered(job_columns: tuple[str, ...]) -> tuple[str, ...]:
    """The attempt columns an ``--exclude`` or ``--redact`` of ``job_columns`` covers."""
    return tuple(sorted({_FROM_JOB.get(c, c) for c in job_columns} & _COVERED))


def open_window(previous: dict[str, Any], *, now: datetime, started: float,
                overlap: timedelta, full: bool) -> Window:
    """Take ``upper`` (``now``: this run's start, on the monotonic clock ``started``) and
    the ``lower`` the runs before allow (0 for a ``full`` run)."""
    floor = int(previous.get("floor", 0))
    last = previous.get("before")
    horizon = None if last is None else datetime.fromisoformat(last) - overlap
    marks: list[tuple[str, int]] = []
    for at, top in previous.get("marks", []):
        if horizon is not None and datetime.fromisoformat(at) <= horizon:
            floor = max(floor, int(top))  # that run's query came before any row in flight
        else:
            marks.append((str(at), int(top)))
    upper = JobAttempt.objects.aggregate(top=Max("id"))["top"] or 0
    after = now + timedelta(seconds=time.monotonic() - started)
    return Window(lower=0 if full else floor, upper=upper, before=now, after=after,
                  floor=floor, marks=tuple(marks))


def next_state(window: Window) -> dict[str, Any]:
    marks = [*window.marks, (window.after.isoformat(), window.upper)]
    if len(marks) > MAX_MARKS:
        marks = [*marks[:-1:2], marks[-1]]
    return {"floor": window.floor, "before": window.before.isoformat(),
            "marks": [list(m) for m in marks]}


def rows_to_export(window: Window, since: datetime | None,
                   until: datetime | None) -> QuerySet[JobAttempt]:
    qs = JobAttempt.objects.filter(id__gt=window.lower, id__lte=window.upper)
    if since is not None:
        qs = qs.filter(job__created_at__gte=since)
    if until is not None:
        qs = qs.filter(job__created_at__lt=until)
    return qs


def _pages(qs: QuerySet[JobAttempt], columns: tuple[str, ...],
           chunk_size: int) -> Iterator[list[tuple[Any, ...]]]:
    """Keyset pages by id (the first column), each row with its job's ``created_at`` and
    ``updated_at`` last, read in the same query."""
    qs = qs.order_by("id")
    after: int | None = None
    while True:
        page_qs = qs if after is None else qs.filter(id__gt=after)
        page = list(page_qs.values_list(*columns, "job__created_at", "job__updated_at")
                    [:chunk_size])
        if not page:
            return
        yield page
        after = page[-1][0]


def _with_jobs(page: list[tuple[Any, ...]], job_at: int, changed_after: datetime,
               job_rows: Callable[[list[str]], set[str]]) -> list[tuple[Any, ...]]:
    """``page`` once ``job_rows`` has written the job rows of its attempt rows whose job
    changed after ``changed_after`` (as read with them); without the attempt rows whose
    job is no longer there (deleted with them since)."""
    fresh = sorted({row[job_at] for row in page if row[-1] > changed_after})
    if not fresh:
        return page
    gone = set(fresh) - job_rows(fresh)
    return [row for row in page if row[job_at] not in gone] if gone else page


def write_attempts(root: Path, qs: QuerySet[JobAttempt], *, exclude: tuple[str, ...],
                   redact: tuple[str, ...], chunk_size: int, bar: Progress,
                   job_rows: Callable[[list[str]], set[str]],
                   changed_after: datetime) -> DayPartitionedWriter:
    """Write the rows of ``qs`` under ``root/attempts``; returns the closed writer (its
    rows, files and what each file holds). The job rows of the attempt rows whose job
    changed after ``changed_after`` (the run's mark minus the overlap) are written first
    with ``job_rows`` (``JobFiles.by_id``): see the module docstring."""
    columns = tuple(c for c in schema.ATTEMPT_COLUMNS if c not in covered(exclude))
    out = pa.schema([*(schema.ATTEMPT_SCHEMA.field(c) for c in columns),
                     pa.field(schema.ATTEMPT_DAY, schema.TS)])
    positions = tuple(columns.index(c) for c in covered(redact))
    with DayPartitionedWriter(root / schema.ATTEMPTS_DIR, out, kind="export",
                              day_column=schema.ATTEMPT_DAY, max_column="id") as writer:
        for page in _pages(qs, columns, chunk_size):
            rows = _with_jobs(page, columns.index("job_id"), changed_after, job_rows)
            writer.write(schema.to_table(schema.redacted(rows, positions), out))
            bar.update(len(page))
    return writer


def mark_complete(root: Path) -> None:
    """Publish the marker (a new file renamed into place) unless it is there."""
    path = Path(root) / ATTEMPTS_MARKER
    if path.is_file() and not path.is_symlink():
        return
    text = json.dumps({"meaning": "every job row in this directory has its attempt rows "
                                  "here (delayq_export, delayq_prune --archive)"})
    fd, tmp = tempfile.mkstemp(prefix=".%s." % ATTEMPTS_MARKER, suffix=".tmp", dir=root)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
