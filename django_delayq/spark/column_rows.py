"""The audit rows of ``schedule_dataframe`` written column-wise (``ColumnWriter``, for
Spark's sink, ``sink.py``): the constant columns adapted once, the rows given as columns
(``prepare_columns``; SQLite binds only the varying ones, the others written as
literals), or on PostgreSQL one COPY text (``copy_layout``, ``copy_text``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import repeat
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, JSONField
from django.db.models.constants import OnConflict

from django_delayq.core import row_insert
from django_delayq.core.row_insert import has_copy
from django_delayq.models import Job

VARYING = ("id", "key", "args", "kwargs", "run_at")  # differ between one writer's rows


def datetime_adapter(using: str) -> Callable[[datetime | None], Any]:
    """The backend's datetime adapter, with SQLite's UTC case done directly (5x faster)."""
    conn = connections[using]
    fast = conn.vendor == "sqlite" and conn.timezone_name == "UTC"
    adapt = conn.ops.adapt_datetimefield_value

    def adapter(value: datetime | None) -> Any:
        if value is None:
            return None
        return str(value.replace(tzinfo=None)) if fast and value.tzinfo is UTC else adapt(value)

    return adapter


COPY_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))


def text_datetimes(using: str) -> str | None:
    """How this backend takes a datetime as text in ``insert_columns``/``copy``:
    ``"sqlite"`` (naive UTC ``YYYY-MM-DD HH:MM:SS[.ffffff]``, what the SQLite adapter
    writes), ``"copy"`` (PostgreSQL COPY, ISO 8601 with an offset), or ``None``
    (adapt datetime objects with ``ColumnWriter.adapt``)."""
    conn = connections[using]
    if conn.vendor == "sqlite" and conn.timezone_name == "UTC":
        return "sqlite"
    return "copy" if conn.vendor == "postgresql" and has_copy(conn) else None


def copy_escape(value: object) -> str:
    """One value in PostgreSQL's COPY text format."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, datetime):
        value = value.isoformat()
    text = str(value)
    for char, escaped in COPY_ESCAPES:
        text = text.replace(char, escaped)
    return text


@dataclass(frozen=True, slots=True)
class PreparedInsert:
    """An INSERT statement and its parameter rows (``ColumnWriter.prepare_columns``)."""

    sql: str
    rows: Sequence[Sequence[Any]]


def _default(field: Field[Any, Any]) -> Any:
    """``field``'s default as a row of ``ColumnWriter`` holds it: JSON as its text, a
    ``TextChoices`` member as its plain value."""
    value = field.get_default()
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str.__str__(value) if isinstance(value, str) else value


def _stored(field: Field[Any, Any], value: object) -> Any:
    """``value`` as a row of ``ColumnWriter`` holds it: JSON as its text."""
    return json.dumps(value) if isinstance(field, JSONField) and value is not None else value


class ColumnWriter:
    """Writes the audit rows of one queue and callable given column-wise (``prepare_columns``)
    or as COPY text (``copy_layout``, ``copy_text``); the constant columns adapted once."""

    def __init__(self, using: str, columns: Mapping[str, Any], *, now: datetime) -> None:
        """``columns``: what every row stores alike (``Checked.columns``: the queue, the
        path, the retries, the run-time options); ``now``: their creation time."""
        self.using = using
        self.fields = list(Job._meta.concrete_fields)
        adapt = datetime_adapter(using)
        const = {**columns, "created_at": adapt(now), "updated_at": adapt(now)}
        # every other column holds its field's default, as ``save()`` would write it
        self.template = [_stored(f, const[f.attname]) if f.attname in const else _default(f)
                         for f in self.fields]
        self.adapt = adapt

    def _columns(self, conn: BaseDatabaseWrapper) -> str:
        return ", ".join(conn.ops.quote_name(str(f.column)) for f in self.fields)

    def _insert_sql(self, conn: BaseDatabaseWrapper, ignore_conflicts: bool, values: str) -> str:
        ops = conn.ops
        on_conflict = OnConflict.IGNORE if ignore_conflicts else None
        return "%s %s (%s) VALUES (%s) %s" % (
            ops.insert_statement(on_conflict=on_conflict), ops.quote_name(Job._meta.db_table),
            self._columns(conn), values,
            ops.on_conflict_suffix_sql(self.fields, on_conflict, None, None))

    def existing(self, ids: Collection[str]) -> set[str]:
        return row_insert.existing(self.using, ids)

    def _sqlite_literals(self, conn: BaseDatabaseWrapper) -> list[str]:
        """SQLite: the constant columns as SQL literals (its own ``quote()``), so that
        ``executemany`` binds only the varying ones."""
        with conn.cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(["quote(%s)"] * len(self.template)),
                           self.template)
            return [str(v).replace("%", "%%") for v in cursor.fetchone()]

    def prepare_columns(self, columns: Mapping[str, Sequence[Any]], *,
                        ignore_conflicts: bool) -> PreparedInsert:
        """The INSERT of rows given column-wise: ``columns`` maps each name of ``VARYING``
        to its values, already adapted (see ``text_datetimes``). Built outside the
        transaction, so that SQLite's write lock is held only while inserting."""
        conn = connections[self.using]
        literals = self._sqlite_literals(conn) if conn.vendor == "sqlite" else None
        marks: list[str] = []
        values: list[Iterable[Any]] = []
        for i, field in enumerate(self.fields):
            if field.attname in columns:
                marks.append("%s")
                values.append(columns[field.attname])
            elif literals is not None:
                marks.append(literals[i])
            else:
                marks.append("%s")
                values.append(repeat(self.template[i]))
        return PreparedInsert(sql=self._insert_sql(conn, ignore_conflicts, ", ".join(marks)),
                              rows=list(zip(*values)))

    def insert_prepared(self, prepared: PreparedInsert, batch_size: int = 10000) -> None:
        """One ``executemany`` per ``batch_size`` rows."""
        with connections[self.using].cursor() as cursor:
            for i in range(0, len(prepared.rows), batch_size):
                cursor.executemany(prepared.sql, prepared.rows[i:i + batch_size])

    def insert_columns(self, columns: Mapping[str, Sequence[Any]], *, ignore_conflicts: bool,
                       batch_size: int = 10000) -> None:
        self.insert_prepared(self.prepare_columns(columns, ignore_conflicts=ignore_conflicts),
                             batch_size)

    def copy_layout(self) -> list[str | None]:
        """Per column, in table order: its COPY text when constant, ``None`` when it is
        one of ``VARYING`` (the caller supplies those, escaped with ``copy_escape``)."""
        return [None if f.attname in VARYING else copy_escape(v)
                for f, v in zip(self.fields, self.template, strict=True)]

    def copy_text(self, payload: str, *, new_only: bool) -> list[str] | None:
        """PostgreSQL: COPY ``payload`` (rows laid out by ``copy_layout``, one per line).
        ``new_only``: rows whose id exists are skipped (COPY into a temporary table, then
        ``INSERT … ON CONFLICT DO NOTHING RETURNING id``) and the new ids returned.
        Run it inside ``transaction.atomic``."""
        conn = connections[self.using]
        ops = conn.ops
        table = ops.quote_name(Job._meta.db_table)
        cols = self._columns(conn)
        with conn.cursor() as wrapper:
            target = table
            if new_only:
                target = "delayq_copy_rows"
                wrapper.execute("CREATE TEMPORARY TABLE %s (LIKE %s) ON COMMIT DROP"
                                % (target, table))
            with wrapper.cursor.copy("COPY %s (%s) FROM STDIN" % (target, cols)) as copy:
                copy.write(payload)
            if not new_only:
                return None
            wrapper.execute("INSERT INTO %s (%s) SELECT %s FROM %s ON CONFLICT DO NOTHING "
                            "RETURNING %s" % (table, cols, cols, target, ops.quote_name("id")))
            new = [row[0] for row in wrapper.fetchall()]
            wrapper.execute("DROP TABLE %s" % target)
            return new
