"""A job's audit row inserted with one prepared statement, without the ORM's per-call
query compilation (``Model.save()`` rebuilds the INSERT and asks for RETURNING on every
call: about half of ``schedule()``'s time on SQLite).

The statement lists every concrete column of ``Job`` (built once per database alias and
kept). Each value is prepared as ``save()`` prepares it (``get_db_prep_save``), through a
shortcut where Django's own field classes make the result known: a ``str`` of a char or
text field, an ``int`` of an integer field, a ``bool``, a ``float`` and ``None`` are
passed as they are, an aware ``datetime`` goes straight to the backend's
``adapt_datetimefield_value``; anything else (JSON, naive or fake datetimes, custom
fields) takes ``get_db_prep_save`` itself. ``tests/core/test_row_insert.py`` compares
both on every column. When the cursor is Django's plain wrapper with no execute wrapper
installed (otherwise, with ``DEBUG`` or ``CaptureQueriesContext`` say, Django's cursor
runs it), the statement skips what a fixed statement makes needless: on SQLite it is
converted to qmark style once, not on every call; on PostgreSQL with client-side binding
(Django's default) psycopg binds the values on the server instead of merging each one
into the SQL text (``_direct``).
``Job`` has no ``pre_save`` work (no ``auto_now``) and no save signals are sent:
``schedule()`` sends its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.backends.utils import CursorWrapper
from django.db.models import Field
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from django_delayq.models import Job

Prepare = Callable[[Any, Any], Any]  # (value, connection) -> the value sent to the driver

_PLAIN = {"CharField": str, "TextField": str, "IntegerField": int, "BigIntegerField": int,
          "SmallIntegerField": int, "PositiveIntegerField": int,
          "PositiveSmallIntegerField": int, "BooleanField": bool, "FloatField": float}


@dataclass(frozen=True, slots=True)
class _Statement:
    sql: str
    qmark: str | None  # SQLite: the same statement in the driver's style
    fields: list[Field[Any, Any]]
    prepare: list[Prepare]


_statements: dict[str, _Statement] = {}


def _preparer(field: Field[Any, Any]) -> Prepare:
    """``field.get_db_prep_save``, short-cut for the values whose result is known."""
    slow = field.get_db_prep_save
    if not type(field).__module__.startswith("django.db.models.fields"):
        return slow
    kind = field.get_internal_type()
    plain = _PLAIN.get(kind)
    if plain is not None:
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
        qmark = None
        if connection.vendor == "sqlite":
            from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX

            qmark = FORMAT_QMARK_REGEX.sub("?", sql).replace("%%", "%")
        found = _statements[using] = _Statement(sql, qmark, fields,
                                                [_preparer(f) for f in fields])
    return found


def _plain_values_only() -> bool:
    """No column left to the database (``db_default`` without ``default``): the values
    of a new ``Job`` are then plain values a field can prepare."""
    return not any(f.has_db_default() and not f.has_default()
                   for f in Job._meta.local_concrete_fields)


def new_row(**values: Any) -> Job:
    """``Job(**values)`` for a new row, without ``Model.__init__``'s per-field work when
    nobody listens to ``pre_init``/``post_init`` for ``Job``: every concrete field takes its
    value or its default, as ``__init__`` gives it. Anything else goes to ``Job(...)``."""
    if not _ONLY_PLAIN or not set(values) <= _ATTNAMES or (
            pre_init.has_listeners(Job) or post_init.has_listeners(Job)):
        return Job(**values)
    row = Job.__new__(Job)
    row._state = ModelState()
    fill = row.__dict__
    for f in Job._meta.concrete_fields:
        name = f.attname
        fill[name] = values[name] if name in values else f.get_default()
    return row


def params(row: Job, using: str) -> list[Any]:
    """The values of ``row`` as the INSERT sends them, in the statement's column order."""
    st, connection = _statement(using), connections[using]
    return [prep(getattr(row, f.attname), connection) for f, prep in zip(st.fields, st.prepare)]


def insert(row: Job, using: str) -> None:
    """INSERT ``row`` (a new job: an existing id raises ``IntegrityError``)."""
    if not _ONLY_PLAIN:
        row.save(force_insert=True, using=using)
        return
    st, connection = _statement(using), connections[using]
    values = [prep(getattr(row, f.attname), connection)
              for f, prep in zip(st.fields, st.prepare)]
    with connection.cursor() as cursor:
        if not _direct(connection, cursor, st, values):
            cursor.execute(st.sql, values)
    row._state.adding = False
    row._state.db = using


def _direct(connection: Any, cursor: Any, st: _Statement, values: list[Any]) -> bool:
    """What ``CursorWrapper.execute`` does, minus what a fixed statement makes needless:
    on SQLite the conversion to qmark style (done once), on PostgreSQL with Django's
    client-side binding (psycopg's ``ClientCursor``, the default) the merging of every
    value into the SQL text: the values are bound by the server instead, without a
    prepared statement (half the time of the INSERT, and poolers need nothing prepared).
    False, nothing done, unless the cursor is Django's plain one with no execute wrapper."""
    if type(cursor) is not CursorWrapper or connection.execute_wrappers:
        return False
    raw = cursor.cursor
    if st.qmark is not None:
        import sqlite3

        if not isinstance(raw, sqlite3.Cursor):
            return False
        connection.validate_no_broken_transaction()
        with connection.wrap_database_errors:
            sqlite3.Cursor.execute(raw, st.qmark, values)
        return True
    if connection.vendor != "postgresql" or type(raw).__name__ != "ClientCursor":
        return False
    import psycopg

    if not isinstance(raw, psycopg.ClientCursor):
        return False
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors, psycopg.Cursor(raw.connection) as bound:
        bound.execute(st.sql, values, prepare=False)
    return True


_ONLY_PLAIN = _plain_values_only()
_ATTNAMES = frozenset(f.attname for f in Job._meta.concrete_fields)
