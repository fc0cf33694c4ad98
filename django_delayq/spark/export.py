"""Stream audit rows to day-partitioned Parquet, incrementally, in bounded memory.

The rows exported by one run are those whose ``updated_at`` lies in
``(high-water mark of the last run - overlap, now - settle]``, and those recorded as
live and due by the last run that have changed since (whose ``created_at`` lies in
``[since, until)`` when given). They are read in keyset pages of ``(created_at, id)``,
never the whole table. The state file ``ROOT/_delayq_export_state.json`` keeps the mark;
it is written only after every file of the run is in place, so a failed run is simply
run again (rows exported twice are the same version and readers deduplicate them).

``updated_at`` is the writer's stamp, not the commit's: a worker writes it late (buffered
batches, retried while the database is locked) and its clock may be behind. So each run
reads from ``overlap`` before the last mark, and also reads again by id every row that
was live and due when the last run started (``pending``: it explains why that is
enough). Every written row carries ``read_at``, the wall-clock time of the read that
found it: a later read sees every commit an earlier one saw, so readers keep, per id,
the version with the latest ``read_at`` (then ``updated_at``): commit order, whatever
the writers' clocks say. ``settle`` leaves rows updated in the last seconds to the
next run.

The same run writes the attempt rows (``JobAttempt``) to ``ROOT/attempts/``, read by id
rather than by a time stamp; ``export_attempts`` explains how nothing is missed there.

The state file is written to a fresh temporary file in ``ROOT`` (random name, created
with ``O_EXCL``) and renamed over the old one, and a symlink at its path is refused: a
link planted in the export directory can neither redirect the write to another file nor
feed the export someone else's state. A value in it that is not what this module writes
(a negative or fractional id, an attempt id above any the database handed out, a
version it never wrote, a text where a list belongs, a time without a zone, a mark later
than this run, a pending record that is not there) is refused with one line
naming the file, the key and the value: read as anything else, it would make a run skip
rows without a word.

Each run that writes files publishes a record of them (``records``), naming the database
it read (``database_identity``); a directory holds the rows of one database, and a run
from another is refused (ids of one database name other rows in another).

``exclude`` leaves columns out of the files (never read from the database); ``redact``
keeps a text column but writes ``"[redacted]"`` for every value but null and the empty
string (JSON columns hold the JSON string ``"[redacted]"``), so e.g. ``args`` carrying
tokens or personal data never reach the Parquet files. ``id``, ``created_at`` and
``updated_at`` are needed to page, partition and deduplicate, and cannot be left out or
redacted. The choice is kept in the state file: a directory mixes no two column layouts.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import pyarrow as pa
from django.db import connections
from django.db.models import QuerySet
from django.utils import timezone

from django_delayq.models import Job, JobAttempt
from django_delayq.spark import export_attempts, pending, records, schema
from django_delayq.spark.export_arguments import BadArgument, check_arguments
from django_delayq.spark.job_files import JobFiles
from django_delayq.spark.preflight import writable_dir
from django_delayq.spark.progress_bar import Progress

if TYPE_CHECKING:
    from django_delayq.spark.writer import DayPartitionedWriter

STATE_FILE = "_delayq_export_state.json"
VERSION = 3  # of the state file; 1 and 2 (no attempts, database, pending) are still read
VERSIONS = (1, 2, VERSION)
DEFAULT_CHUNK = 5000
REDACTED = schema.REDACTED
DEFAULT_OVERLAP = timedelta(seconds=60)
__all__ = ["BadArgument", "ExportResult", "export_jobs"]  # BadArgument: delayq_export's


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportResult:
    rows: int
    files: list[Path] = field(default_factory=list)
    previous_mark: datetime | None = None
    mark: datetime
    attempt_rows: int | None = None  # None: not exported (a directory begun without them)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _parse(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def database_identity(alias: str | None = None) -> str:
    """Which database the rows come from: its engine, host, port and name (never the user
    or the password), e.g. ``postgresql://db:5432/shop`` or ``sqlite:/srv/db.sqlite3``.
    One database reached under two host names counts as two."""
    connection = connections[alias or Job.objects.db]
    settings = connection.settings_dict
    name = str(settings.get("NAME") or "")
    host, port = str(settings.get("HOST") or ""), str(settings.get("PORT") or "")
    if not host and not port:
        return "%s:%s" % (connection.vendor, name)
    return "%s://%s%s/%s" % (connection.vendor, host, ":" + port if port else "", name)


def _bad(path: Path, key: str, value: object, expected: str) -> ValueError:
    return ValueError("%s: %s is %s, not %s; fix the file, or export to a new directory"
                      % (path, key, json.dumps(value, default=str), expected))


def _when(path: Path, key: str, value: object) -> datetime | None:
    return None if value is None else export_attempts.checked_when(str(path), key, value)


def check_state(state: object, path: Path) -> dict[str, Any]:
    """``state`` if every value is of the kind this module writes; else a ValueError
    naming ``path``, the key and the value (see the module docstring)."""
    if not isinstance(state, dict):
        raise ValueError("%s: not a JSON object; fix the file, or export to a new directory"
                         % path)
    if _when(path, "high_water", state.get("high_water")) is None:
        raise _bad(path, "high_water", state.get("high_water"),
                   "an ISO datetime with a time zone")
    for key in ("since", "until"):
        _when(path, key, state.get(key))
    version = state.get("version")
    if type(version) is not int or version not in VERSIONS:  # not True, not 3.0
        raise _bad(path, "version", version,
                   "a version delayq_export writes (%s)" % ", ".join(map(str, VERSIONS)))
    for key in ("runs", "last_run_rows", "last_run_attempt_rows"):
        value = state.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _bad(path, key, value, "an integer >= 0")
    for key in ("exclude", "redact"):
        names = state.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _bad(path, key, names, "a list of column names")
    name = state.get("pending")
    if name is not None and not pending.is_name(name):
        raise _bad(path, "pending", name, "the name of a record %s<hex>.parquet" % pending.PREFIX)
    overlap = state.get("overlap_seconds", 0)
    if isinstance(overlap, bool) or not isinstance(overlap, int | float) \
            or not 0 <= overlap < float("inf"):
        raise _bad(path, "overlap_seconds", overlap, "a number of seconds >= 0")
    if not isinstance(state.get("database", ""), str):
        raise _bad(path, "database", state["database"], "a text naming a database")
    export_attempts.check_state(state.get(export_attempts.STATE_KEY), str(path))
    return state


def _not_later(path: Path, key: str, value: datetime | None, latest: datetime) -> None:
    if value is not None and value > latest:
        raise ValueError("%s: %s is %s, later than this run's time plus the overlap (%s): "
                         "a run would skip every row changed until then; fix the file, run "
                         "a full export, or export to a new directory"
                         % (path, key, value.isoformat(), latest.isoformat()))


def read_state(root: Path) -> dict[str, Any] | None:
    """The state of the last run, or None; a symlink (or anything not a regular file) at
    the state file's path is refused, never followed, and so is a value that is not of
    the kind this module writes (``check_state``)."""
    path = Path(root) / STATE_FILE
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if path.is_symlink():
            raise ValueError("%s is a symlink; refusing to follow it (remove it, or export "
                             "to another directory)" % path) from exc
        raise
    with os.fdopen(fd, "r") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError("%s is not a regular file; refusing it" % path)
        try:
            state = json.loads(fh.read())
        except ValueError as exc:
            raise ValueError("%s: not JSON (%s); fix the file, or export to a new directory"
                             % (path, exc)) from None
        return check_state(state, path)


def _write_state(root: Path, state: dict[str, Any]) -> None:
    """Atomically: a new temporary file (O_EXCL, random name) in ``root``, renamed over
    the state file (a rename replaces a link planted there, it does not follow it)."""
    path = Path(root) / STATE_FILE
    fd, tmp = tempfile.mkstemp(prefix=".%s." % STATE_FILE, suffix=".tmp", dir=root)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(state, indent=2, sort_keys=True))
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_columns(state: dict[str, Any] | None, exclude: tuple[str, ...],
                   redact: tuple[str, ...]) -> None:
    if state is None:
        return
    before = (tuple(state.get("exclude", ())), tuple(state.get("redact", ())))
    if before != (exclude, redact):
        raise ValueError(
            "this directory was exported with --exclude %s --redact %s; use the same "
            "columns or another directory (its files must share one layout)"
            % (",".join(before[0]) or "(none)", ",".join(before[1]) or "(none)"))


def check_database(root: Path, database: str, state: dict[str, Any] | None = None) -> None:
    """One directory, one database: refuse a run reading another than the one named by
    the state file (read here unless given) or by the directory's file records."""
    if state is None:
        state = read_state(root)
    before = (state or {}).get("database")
    if before is not None and before != database:
        raise ValueError("%s was exported from another database (%s), not from this one (%s): "
                         "ids of one name other rows in another; export each database to "
                         "its own directory" % (root, before, database))
    records.check_database(root, database)


def _previous_mark(root: Path, state: dict[str, Any] | None, since: datetime | None,
                   until: datetime | None, full: bool, latest: datetime) -> datetime | None:
    if state is None or full:
        return None
    if (state.get("since"), state.get("until")) != (_iso(since), _iso(until)):
        raise ValueError(
            "this directory was exported with --since %s --until %s; use the same range, "
            "another directory, or a full export" % (state.get("since"), state.get("until")))
    mark = _parse(state["high_water"])
    _not_later(root / STATE_FILE, "high_water", mark, latest)
    return mark


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


def prepare_root(root: Path) -> None:
    """Create ``root`` and prove it writable before anything is read: a clear ValueError
    (the command's error message) instead of a traceback from deep inside the writer."""
    writable_dir(root, "export to")


def _recorded(root: Path, state: dict[str, Any] | None) -> pa.Table | None:
    """The record of live, due rows the last run left (``pending``); a state naming one
    that is not there is refused: without it, rows changed late would be missed."""
    name = (state or {}).get("pending")
    table = pending.read(root, name)
    if name and table is None:
        raise ValueError("%s names the record %s, which is not in %s: the rows it lists "
                         "could not be checked for late changes; restore it, or run a full "
                         "export" % (root / STATE_FILE, name, root))
    return table


def _checked_mark(root: Path, state: dict[str, Any] | None, since: datetime | None,
                  until: datetime | None, full: bool, latest: datetime) -> datetime | None:
    """The previous run's mark (None: export from the start), its attempts' mark checked
    not to be later than ``latest`` too."""
    previous = _previous_mark(root, state, since, until, full, latest)
    if state is not None and state.get(export_attempts.STATE_KEY):
        _not_later(root / STATE_FILE, "attempts.before",
                   _parse(state[export_attempts.STATE_KEY].get("before")), latest)
        export_attempts.check_issued(state[export_attempts.STATE_KEY], str(root / STATE_FILE))
    return previous


def _write_files(root: Path, querysets: Iterable[QuerySet[Job]],
                 attempt_qs: QuerySet[JobAttempt] | None, excluded: tuple[str, ...],
                 redacted: tuple[str, ...], chunk_size: int, bar: Progress,
                 changed_after: datetime) -> tuple[DayPartitionedWriter,
                                                   DayPartitionedWriter | None]:
    """The job rows of ``querysets``, then the attempt rows of ``attempt_qs`` (None: not
    exported) with the job rows of those whose job changed after ``changed_after``
    (``export_attempts``); the closed writers of jobs and attempts."""
    with JobFiles(root, excluded, redacted, bar, recent_after=changed_after) as jobs:
        for qs in querysets:
            jobs.write(qs, chunk_size)
        attempts = None if attempt_qs is None else export_attempts.write_attempts(
            root, attempt_qs, exclude=excluded, redact=redacted, chunk_size=chunk_size,
            bar=bar, job_rows=jobs.by_id, changed_after=changed_after)
    return jobs.writer, attempts


def export_jobs(root: Path | str, *, since: datetime | None = None,
                until: datetime | None = None, full: bool = False,
                chunk_size: int = DEFAULT_CHUNK, settle: timedelta = timedelta(seconds=2),
                now: datetime | None = None, progress: bool = True,
                stream: TextIO | None = None, exclude: str | Iterable[str] | None = None,
                redact: str | Iterable[str] | None = None,
                overlap: timedelta = DEFAULT_OVERLAP) -> ExportResult:
    excluded, redacted = check_arguments(since, until, chunk_size, settle, overlap,
                                         exclude, redact)
    root = Path(root)
    prepare_root(root)
    state = read_state(root)
    _check_columns(state, excluded, redacted)
    database = database_identity()
    check_database(root, database, state)
    now = now or timezone.now()
    started = time.monotonic()  # with ``now``: the attempts' clock (export_attempts)
    previous = _checked_mark(root, state, since, until, full, now + overlap)
    mark = now - settle if previous is None else max(now - settle, previous)  # never back
    recorded = _recorded(root, state) if previous else None
    captured = pending.capture(now + overlap)  # before reading anything: see ``pending``
    lower = None if previous is None else previous - overlap
    window = rows_to_export(lower, mark, since, until)
    late = [] if lower is None else list(pending.changed(recorded))
    again = [rows_to_export(None, lower or mark, since, until).filter(pk__in=late[i:i + 1000])
             for i in range(0, len(late), 1000)]  # changed late: older than the window
    tracked = export_attempts.tracked(state)  # None: a directory begun without them
    records.adopt(root, database)  # files of a directory written before records existed
    attempts = None if tracked is None else export_attempts.open_window(
        tracked, now=now, started=started, overlap=overlap, full=full)  # before the jobs
    attempt_qs = None if attempts is None else export_attempts.rows_to_export(
        attempts, since, until)
    total = window.count() + len(late) + (0 if attempt_qs is None else attempt_qs.count())
    bar = Progress(total, "delayq_export", stream=stream, enabled=progress)
    writer, attempt_writer = _write_files(root, (window, *again), attempt_qs, excluded,
                                          redacted, chunk_size, bar, mark - overlap)
    attempt_rows = None if attempt_writer is None else attempt_writer.rows
    attempt_files = [] if attempt_writer is None else attempt_writer.files
    bar.close()
    files = {**writer.written, **({} if attempt_writer is None else attempt_writer.written)}
    if files:  # what the report may read: these files, from this database
        records.write(root, records.new_name("export"), writer="export", database=database,
                      attempts_complete=attempts is not None,
                      files=records.written(root, files))
    name = pending.write(root, captured)
    runs = (state or {}).get("runs", 0) + 1
    new_state = {"version": VERSION, "high_water": _iso(mark), "since": _iso(since),
                 "until": _iso(until), "runs": runs, "last_run_rows": writer.rows,
                 "exclude": list(excluded), "redact": list(redacted), "pending": name,
                 "overlap_seconds": overlap.total_seconds(), "database": database}
    if attempts is not None:
        new_state[export_attempts.STATE_KEY] = export_attempts.next_state(attempts)
        new_state["last_run_attempt_rows"] = attempt_rows
        export_attempts.mark_complete(root)
    _write_state(root, new_state)
    pending.remove_others(root, keep=name)
    return ExportResult(rows=writer.rows, files=writer.files + attempt_files,
                        previous_mark=previous, mark=mark, attempt_rows=attempt_rows)
