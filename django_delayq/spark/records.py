"""What the writers wrote into a directory, so that the report reads that and nothing else.

Every run of ``delayq_export`` that writes files, and every run of ``delayq_prune
--archive``, publishes a record, ``ROOT/_delayq_files/<run>.json``: the database it read
(``database``), whether it wrote the attempt rows of every job row it wrote in a
directory that has them from its first run (``attempts_complete``), and every Parquet
file it wrote, with its rows (and for attempt files the highest attempt id). A record is
written to a new file and renamed into place after the files it lists are published,
before the export's state file moves on and before ``delayq_prune`` deletes the rows:
a run that fails leaves files that no record lists (never read) and rows that the next
run writes again.

The report (``source``) reads only the files the records list; a Parquet file put under
``jobs/`` or ``attempts/`` by anything else is left out and counted. What it reads is
checked against the records: every listed file present, the rows of the listed job and
attempt files adding up to the recorded rows, the highest attempt id the recorded one.
A directory whose records name two databases is refused: an id of one database names
another row, or none, in the other.

A directory written before records existed has none. The first export or archive run
that writes to it records the files already there that are named as the writers name
them (``adopted-*.json``), as they are, with ``attempts_complete`` saying whether the
marker was there; until then the report refuses it.

Nothing heavy is imported at module level (pyarrow only to adopt files).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django_delayq.spark.preflight import ATTEMPTS_DIR, ATTEMPTS_MARKER, JOBS_DIR, RECORDS_DIR

VERSION = 1
WRITERS = ("export", "archive", "adopted")
# the files the writers publish (``writer.DayPartitionedWriter``)
FILE_PATH = re.compile(r"^(%s|%s)/day=\d{4}-\d{2}-\d{2}/(?:export|archive)-\d{8}T\d{6}Z"
                       r"-[0-9a-f]{8}-\d{3}\.parquet$" % (JOBS_DIR, ATTEMPTS_DIR))


@dataclass(frozen=True, slots=True)
class Written:
    """One published file: its path under the directory, its rows, and for an attempt
    file its highest attempt id (None without rows)."""

    path: str
    rows: int
    max_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Inventory:
    """Every record of a directory, merged."""

    jobs: dict[str, int]  # path -> rows
    attempts: dict[str, tuple[int, int | None]]  # path -> (rows, highest id)
    databases: frozenset[str]
    incomplete: tuple[str, ...]  # records whose run did not write its jobs' attempt rows
    records: int
    unrecorded: tuple[str, ...] | None  # Parquet files no record lists (None: not listed)

    @property
    def job_rows(self) -> int:
        return sum(self.jobs.values())

    @property
    def attempt_rows(self) -> int:
        return sum(rows for rows, _ in self.attempts.values())

    @property
    def attempt_max_id(self) -> int | None:
        tops = [top for _, top in self.attempts.values() if top is not None]
        return max(tops) if tops else None


def new_name(writer: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return "%s-%s-%s.json" % (writer, stamp, uuid.uuid4().hex[:12])


def written(root: Path, files: Mapping[Path, tuple[int, int | None]]) -> list[Written]:
    """A writer's ``written`` as paths under ``root``."""
    return [Written(path.relative_to(root).as_posix(), rows, top)
            for path, (rows, top) in files.items()]


def write(root: Path, name: str, *, writer: str, database: str, attempts_complete: bool,
          files: Iterable[Written]) -> None:
    """Publish (a new file renamed into place, over an earlier version of the same run's
    record) the record ``name``."""
    folder = Path(root) / RECORDS_DIR
    folder.mkdir(exist_ok=True)
    body = {"version": VERSION, "writer": writer, "database": database,
            "attempts_complete": attempts_complete,
            "written_at": datetime.now(UTC).isoformat(),
            "files": [{"path": f.path, "rows": f.rows,
                       **({} if f.max_id is None else {"max_id": f.max_id})} for f in files]}
    fd, tmp = tempfile.mkstemp(prefix=".%s." % name, suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(body, separators=(",", ":")) + "\n")  # one line: one row
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(folder / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _count(value: Any, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("%s: %s is %s, not a count (an integer >= 0); the record is damaged "
                         "or not delayq's" % (where, what, json.dumps(value)))
    return value


def parse(text: str, where: str) -> dict[str, Any]:
    """A record's content, checked; a ValueError naming ``where`` and the bad value."""
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise ValueError("%s: not JSON (%s); the record is damaged or not delayq's"
                         % (where, exc)) from None
    if not isinstance(body, dict):
        raise ValueError("%s: not a JSON object; the record is damaged or not delayq's" % where)
    for key, kind, what in (("database", str, "a text"), ("attempts_complete", bool, "true or "
                            "false"), ("files", list, "a list")):
        if not isinstance(body.get(key), kind):
            raise ValueError("%s: %s is %s, not %s; the record is damaged or not delayq's"
                             % (where, key, json.dumps(body.get(key)), what))
    for i, entry in enumerate(body["files"]):
        path = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(path, str) or not FILE_PATH.match(path):
            raise ValueError("%s: files[%d] names %s, not a file delayq writes (jobs/ or "
                             "attempts/day=YYYY-MM-DD/export-... or archive-....parquet)"
                             % (where, i, json.dumps(path)))
        _count(entry.get("rows"), "files[%d].rows" % i, where)
        if entry.get("max_id") is not None:
            _count(entry["max_id"], "files[%d].max_id" % i, where)
    return body


def inventory(texts: Iterable[tuple[str, str]], found: Iterable[str] | None,
              where: str) -> Inventory:
    """Merge the records (``(name, text)``); ``found``: the published Parquet files under
    ``jobs/`` and ``attempts/``, or None where they cannot be listed."""
    jobs: dict[str, int] = {}
    attempts: dict[str, tuple[int, int | None]] = {}
    databases: set[str] = set()
    incomplete = []
    count = 0
    for name, text in texts:
        body = parse(text, "%s/%s/%s" % (where, RECORDS_DIR, name))
        count += 1
        databases.add(body["database"])
        if not body["attempts_complete"]:
            incomplete.append(name)
        for entry in body["files"]:
            path, rows = entry["path"], entry["rows"]
            kind: dict[str, Any] = jobs if path.startswith(JOBS_DIR + "/") else attempts
            value = rows if kind is jobs else (rows, entry.get("max_id"))
            if kind.setdefault(path, value) != value:
                raise ValueError("%s: two file records say different things of %s (%s and "
                                 "%s); the records are damaged" % (where, path, kind[path], value))
    listed = set(jobs) | set(attempts)
    unrecorded = None if found is None else tuple(sorted(set(found) - listed))
    return Inventory(jobs=jobs, attempts=attempts, databases=frozenset(databases),
                     incomplete=tuple(sorted(incomplete)), records=count, unrecorded=unrecorded)


def usable(inv: Inventory, where: str) -> Inventory:
    """The checks before anything is read: one database; records for the files there."""
    if len(inv.databases) > 1:
        raise ValueError("%s holds files exported from %d databases (%s): ids of one name "
                         "other rows in another; report on each database's directory apart"
                         % (where, len(inv.databases), ", ".join(sorted(inv.databases))))
    if inv.records == 0 and inv.unrecorded:
        raise ValueError("%s holds %d Parquet files but no record of what delayq wrote there "
                         "(written before delayq_export recorded its files): run delayq_export "
                         "--out %s (or delayq_prune --archive %s) once to record them"
                         % (where, len(inv.unrecorded), where, where))
    return inv


def read_texts(root: Path) -> list[tuple[str, str]]:
    """The records of a local directory, ``(name, text)``; none when it has none."""
    folder = Path(root) / RECORDS_DIR
    if not folder.is_dir():
        return []
    return [(path.name, path.read_text()) for path in sorted(folder.glob("*.json"))
            if not path.name.startswith((".", "_")) and path.is_file()]


def listing(root: Path) -> list[str]:
    """The published Parquet files under ``root/jobs`` and ``root/attempts`` (paths under
    ``root``), skipping what Spark skips: names starting with a dot or an underscore."""
    out = []
    for sub in (JOBS_DIR, ATTEMPTS_DIR):
        base = Path(root) / sub
        if not base.is_dir():
            continue
        for path in base.rglob("*.parquet"):
            parts = path.relative_to(base).parts
            if path.is_file() and not any(p[0] in "._" for p in parts):
                out.append(path.relative_to(root).as_posix())
    return sorted(out)


def check_database(root: Path, database: str) -> None:
    """Refuse to write from ``database`` into a directory whose records name another."""
    others = {parse(text, "%s/%s/%s" % (root, RECORDS_DIR, name))["database"]
              for name, text in read_texts(root)} - {database}
    if others:
        raise ValueError("%s holds files exported from another database (%s), not from this "
                         "one (%s): ids of one name other rows in another; write each "
                         "database to its own directory" % (root, ", ".join(sorted(others)),
                                                           database))


def adopt(root: Path, database: str) -> str | None:
    """Record the files of a directory written before records existed (see the module
    docstring); returns the record's name, or None when there was nothing to adopt."""
    import pyarrow.parquet as pq  # lazy: the report reads records without pyarrow

    if read_texts(root):
        return None
    files = []
    for path in listing(root):
        if not FILE_PATH.match(path):
            continue
        meta = pq.ParquetFile(Path(root) / path)
        top = None
        if path.startswith(ATTEMPTS_DIR + "/") and meta.metadata.num_rows:
            ids = meta.read(columns=["id"]).column("id").to_pylist()
            top = max((i for i in ids if i is not None), default=None)
        files.append(Written(path, meta.metadata.num_rows, top))
    if not files:
        return None
    name = new_name("adopted")
    write(root, name, writer="adopted", database=database, files=files,
          attempts_complete=(Path(root) / ATTEMPTS_MARKER).is_file())
    return name
