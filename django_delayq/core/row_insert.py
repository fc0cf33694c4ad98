"""A job's audit row inserted with one prepared statement through Django's cursor
(``connection.cursor()``), without the ORM's per-call query compilation (``Model.save()``
rebuilds the INSERT and asks for RETURNING on every call: about half of ``schedule()``'s
time on SQLite).

The statement lists every concrete column of ``Job`` (built once per database alias and
kept). Each value is prepared as ``save()`` prepares it (``get_db_prep_save``), through a
shortcut where Django's own field classes make the result known: a ``str`` of a char or
text field, an ``int`` of an integer field, a ``bool``, a ``float`` and ``None`` are
passed as they are, an aware ``datetime`` goes straight to the backend's
``adapt_datetimefield_value``; anything else (JSON, naive or fake datetimes, custom
fields) takes ``get_db_prep_save`` itself. ``tests/core/test_row_insert.py`` compares
both on every column, and the rows this module stores with the rows ``save()`` stores,
column by column, on each database. The statement runs through Django's cursor, so
``DEBUG``, query capture and execute wrappers see it; on PostgreSQL, Django's
``OPTIONS["server_side_binding"]`` has the server bind its values instead of psycopg
merging them into the SQL text. ``Job`` has no ``pre_save`` work (no ``auto_now``) and no
save signals are sent: ``schedule()`` sends its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import Field

from django_delayq.models import Job

Prepare = Callable[[Any, Any], Any]  # (value, connection) -> the value sent to the driver

_PLAIN = {"CharField": str, "TextField": str, "IntegerField": int, "BigIntegerField": int,
          "SmallIntegerField": int, "PositiveIntegerField": int,
          "PositiveSmallIntegerField": int, "BooleanField": bool, "FloatField": float}


@dataclass(frozen=True, slots=True)
class _Statement:
    sql: str
    fields: list[Field[Any, Any]]
    prepare: list[Prepare]


_statements: dict[str, _Statement] = {}


def _preparer(field: Field[Any, Any]) -> Prepare:
    """``field.get_db_prep_save``, short-cut for the values whose result is known."""
    slow = field.get_db_prep_save
    if not type(field).__module__.startswith("django.db.models.fields"):
        return slow
    kind = field.get_internal_type()
    if (plain := _PLAIN.get(kind)) is not None:
        return lambda v, c: v if v is None or type(v) is plain else slow(v, c)
    if kind == "DateTimeField":
        return lambda v, c: (c.ops.adapt_datetimefield_value(v) if type(v) is datetime
                             and v.tzinfo is not None else slow(v, c))
    return slow


def _statement(using: str) -> _Statement:
    found = _statements.get(using)
    if found is None:
        connection = connections[using]
        qn = connection.ops.quote_name
        fields: list[Field[Any, Any]] = list(Job._meta.local_concrete_fields)
        sql = "INSERT INTO %s (%s) VALUES (%s)" % (
            qn(str(Job._meta.db_table)), ", ".join(qn(str(f.column)) for f in fields),
            ", ".join(["%s"] * len(fields)))
        found = _statements[using] = _Statement(sql, fields, [_preparer(f) for f in fields])
    return found


def _plain_values_only() -> bool:
    """No column left to the database (``db_default`` without ``default``): the values
    of a new ``Job`` are then plain values a field can prepare."""
    return not any(f.has_db_default() and not f.has_default()
                   for f in Job._meta.local_concrete_fields)


def new_row(**values: object) -> Job:
    """``Job(**values)`` for a new row, built as Django builds a row it loads
    (``Model.from_db``): every concrete field's value given by position, its default where
    ``values`` has none (positional arguments skip ``__init__``'s per-keyword work)."""
    if not set(values) <= _ATTNAMES:
        return Job(**values)  # not a column's name: Job raises as it does
    by_position: Any = [values[f.attname] if f.attname in values else f.get_default()
                        for f in _CONCRETE]
    return Job(*by_position)


def params(row: Job, using: str) -> list[Any]:
    """The values of ``row`` as the INSERT sends them, in the statement's column order."""
    st, connection = _statement(using), connections[using]
    return [prep(getattr(row, f.attname), connection) for f, prep in zip(st.fields, st.prepare)]


def insert(row: Job, using: str) -> None:
    """INSERT ``row`` (a new job: an existing id raises ``IntegrityError``)."""
    if not _ONLY_PLAIN:
        row.save(force_insert=True, using=using)
        return
    with connections[using].cursor() as cursor:
        cursor.execute(_statement(using).sql, params(row, using))
    row._state.adding = False
    row._state.db = using


_ONLY_PLAIN = _plain_values_only()
_CONCRETE = tuple(Job._meta.concrete_fields)
_ATTNAMES = frozenset(f.attname for f in _CONCRETE)
