"""Write Arrow tables into a day-partitioned Parquet directory, crash-safe.

Each file is written under a dot-name (which Spark and pyarrow datasets skip) and
renamed into place when closed, so a reader never sees half a file.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

MAX_OPEN_WRITERS = 4


class DayPartitionedWriter:
    """Appends tables to ``root/day=YYYY-MM-DD/<stem>-<n>.parquet`` (UTC day of ``day_column``).

    One file per day per writer; each ``write()`` adds a row group, so memory stays
    bounded by one chunk. Close it (or use ``with``) to publish the files. ``written``
    says, per published file, its rows and (with ``max_column``) that column's highest
    value: what the file records (``records``) list.
    """

    def __init__(self, root: Path, schema: pa.Schema, *, kind: str, day_column: str,
                 max_column: str | None = None) -> None:
        self.root = Path(root)
        self.schema = schema
        self.day_column = day_column
        self.max_column = max_column
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        self.stem = "%s-%s-%s" % (kind, stamp, uuid.uuid4().hex[:8])
        self._open: dict[str, tuple[pq.ParquetWriter, Path, Path]] = {}
        self._counts: dict[str, tuple[int, int | None]] = {}  # per open day: rows, max
        self.files: list[Path] = []
        self.written: dict[Path, tuple[int, int | None]] = {}
        self.rows = 0

    def __enter__(self) -> DayPartitionedWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        days = pc.strftime(table[self.day_column], format="%Y-%m-%d")
        for day in pc.unique(days).to_pylist():
            part = table.filter(pc.equal(days, day))
            self._writer(day).write_table(part)
            self.rows += part.num_rows
            rows, top = self._counts.get(day, (0, None))
            if self.max_column is not None:
                high = pc.max(part[self.max_column]).as_py()
                top = high if top is None or (high is not None and high > top) else top
            self._counts[day] = (rows + part.num_rows, top)

    def _writer(self, day: str) -> pq.ParquetWriter:
        if day not in self._open:
            if len(self._open) >= MAX_OPEN_WRITERS:
                self._publish(next(iter(self._open)))
            folder = self.root / ("day=%s" % day)
            folder.mkdir(parents=True, exist_ok=True)
            n = sum(1 for f in self.files if f.parent == folder)
            final = folder / ("%s-%03d.parquet" % (self.stem, n))
            tmp = folder / (".%s.tmp" % final.name)
            self._open[day] = (pq.ParquetWriter(tmp, self.schema, compression="zstd"), tmp, final)
        return self._open[day][0]

    def _publish(self, day: str) -> None:
        writer, tmp, final = self._open.pop(day)
        writer.close()
        Path(tmp).replace(final)
        self.files.append(final)
        self.written[final] = self._counts.pop(day, (0, None))

    def close(self) -> list[Path]:
        for day in list(self._open):
            self._publish(day)
        return self.files

    def abort(self) -> None:
        for writer, tmp, _final in self._open.values():
            writer.close()
            tmp.unlink(missing_ok=True)
        self._open.clear()
        self._counts.clear()
