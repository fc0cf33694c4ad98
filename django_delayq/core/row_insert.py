"""A job's audit row inserted with one prepared statement through Django's cursor
(``connection.cursor()``), without the ORM's per-call query compilation (``Model.save()``
rebuilds the INSERT and asks for RETURNING on every call: about half of ``schedule()``'s
time on SQLite).

The statement lists every concrete column of ``Job`` (built once per database alias and
kept). ``insert_values`` runs one statement per set of names given (a plan, kept): the
columns left at a constant default (``NULL``, ``''``, ``0``, ``FALSE``, ``'scheduled'``)
are written as SQL literals and only the others bound, so that the driver adapts (and on
SQLite, Django's cursor converts to ``?``) ten parameters for a plain ``schedule()``, not
thirty. Each value is prepared as ``save()`` prepares it (``get_db_prep_save``), through
a shortcut where Django's own field classes make the result known: a ``str`` of a char or
text field, an ``int`` of an integer field, a ``bool``, a ``float`` and ``None`` are
passed as they are, an aware ``datetime`` goes straight to the backend's
``adapt_datetimefield_value`` (on SQLite with ``USE_TZ`` and the connection in UTC, a UTC
datetime becomes the text that adapter gives, without the call), a list or a dict of a
``JSONField`` straight to ``adapt_json_value``; anything else (naive or fake datetimes,
other JSON values, custom fields) takes ``get_db_prep_save`` itself.
``tests/core/test_row_insert.py`` compares both on every column, and the rows this module
stores with the rows ``save()`` stores, column by column, on each database. The statement
runs through Django's cursor, so ``DEBUG``, query capture and execute wrappers see it; on
PostgreSQL, Django's ``OPTIONS["server_side_binding"]`` has the server bind its values
instead of psycopg merging them into the SQL text. ``Job`` has no ``pre_save`` work (no
``auto_now``) and no save signals are sent: ``schedule()`` sends its own. With
``pre_init``/``post_init`` receivers, ``insert_values`` builds the ``Job`` (they see it)
and inserts its values; with a column left to the database (``db_default``), it calls
``save()``: one interface. ``insert_many`` writes ``schedule_many``'s rows through the
same plans (one ``executemany`` per plan, or one COPY on PostgreSQL); ``existing`` says
which ids have a row already.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, Field, JSONField
from django.db.models.constants import OnConflict
from django.db.models.signals import post_init, pre_init

from django_delayq.models import Job

Prepare = Callable[[Any, Any], Any]  # (value, connection) -> the value sent to the driver

_PLAIN = {"CharField": str, "TextField": str, "IntegerField": int, "BigIntegerField": int,
          "SmallIntegerField": int, "PositiveIntegerField": int,
          "PositiveSmallIntegerField": int, "BooleanField": bool, "FloatField": float}


@dataclass(frozen=True, slots=True)
class _Statement:
    table: str  # the table and its columns: ``"table" ("id", ...)``
    head: str  # the INSERT of every column up to its VALUES' parenthesis (a plan's follows)
    # per field, in the statement's column order: its attname, its preparer, its default
    # prepared once (a constant default whose prepared value is immutable; else
    # _EACH_TIME: prepared per row), whether it is one of Django's DateTimeFields (a
    # datetime given twice: adapted once), the type of value it sends as it is
    # (``_PLAIN``, else ``None``) and its None prepared once when that gives an immutable
    # value (else _EACH_TIME)
    by_name: list[tuple[str, Prepare, Any, bool, type | None, Any]]
    # SQLite: its datetime adapter's result is known for a UTC datetime (``values_params``)
    sqlite: bool
    # the plans of ``values_params``, by the names a caller gives
    plans: dict[tuple[str, ...], _Plan] = dataclass_field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Plan:
    """How ``values_params`` fills the statement's values from a dict of these names:
    a copy of ``template`` (each constant default prepared already), then per name given
    (index, name, the type passed as it is or ``None``, preparer, is a DateTimeField, its
    prepared None), then per default prepared per row (index, name, preparer)."""

    template: list[Any]
    given: tuple[tuple[int, str, type | None, Prepare, bool, Any], ...]
    each_time: tuple[tuple[int, str, Prepare], ...]
    # ``insert_values``' statement: the constant defaults as literals, the other columns
    # as parameters, and the getter of those parameters from the row's values
    sql: str
    bound: Callable[[list[Any]], Sequence[Any]]
    # the callable defaults the statement writes as literals (an empty JSON object), per
    # row for ``values_params`` only (index, name, preparer)
    each_literal: tuple[tuple[int, str, Prepare], ...]


_EACH_TIME = object()  # a default prepared per row (a callable default, a mutable value)
_IMMUTABLE = (type(None), str, int, bool, float)


_statements: dict[str, _Statement] = {}


def _plain_type(field: Field[Any, Any]) -> type | None:
    """The type whose values ``field`` sends as they are (Django's own fields), or None."""
    if not type(field).__module__.startswith("django.db.models.fields"):
        return None
    return _PLAIN.get(field.get_internal_type())


def _preparer(field: Field[Any, Any]) -> Prepare:
    """``field.get_db_prep_save``, short-cut for the values whose result is known."""
    slow = field.get_db_prep_save
    if (plain := _plain_type(field)) is not None:
        return lambda v, c: v if v is None or type(v) is plain else slow(v, c)
    if type(field) is DateTimeField:
        return lambda v, c: (c.ops.adapt_datetimefield_value(v) if type(v) is datetime
                             and v.tzinfo is not None else slow(v, c))
    if type(field) is JSONField:  # get_prep_value keeps a list or a dict as it is
        encoder = field.encoder
        return lambda v, c: (c.ops.adapt_json_value(v, encoder) if type(v) is list
                             or type(v) is dict else slow(v, c))
    return slow


def _statement(using: str) -> _Statement:
    found = _statements.get(using)
    if found is None:
        connection = connections[using]
        qn = connection.ops.quote_name
        fields: list[Field[Any, Any]] = list(Job._meta.local_concrete_fields)
        table = "%s (%s)" % (qn(str(Job._meta.db_table)),
                             ", ".join(qn(str(f.column)) for f in fields))
        by_name = [(f.attname, prep, _prepared_default(f, prep, connection),
                    type(f) is DateTimeField, _plain_type(f), _immutable(prep, None, connection))
                   for f, prep in ((f, _preparer(f)) for f in fields)]
        found = _statements[using] = _Statement(table, "INSERT INTO %s VALUES (" % table,
                                                by_name, connection.vendor == "sqlite")
    return found


def _immutable(prep: Prepare, value: Any, connection: Any) -> Any:
    """``prep(value)`` when it is an immutable value (the same for every row), else
    ``_EACH_TIME``. A ``str`` or ``int`` subclass (a ``TextChoices`` member) counts as
    its plain value: the driver sends the same."""
    prepared = prep(value, connection)
    return prepared if isinstance(prepared, _IMMUTABLE) else _EACH_TIME


def _prepared_default(field: Field[Any, Any], prep: Prepare, connection: Any) -> Any:
    """``field``'s default as the INSERT sends it, when it is the same for every row (not
    a callable, prepared to an immutable value; a field without one: Django's None or
    ""); else ``_EACH_TIME``."""
    each_time = field.has_default() and callable(field.default)
    return _EACH_TIME if each_time else _immutable(prep, field.get_default(), connection)


def new_row(**values: object) -> Job:
    """``Job(**values)`` for a new row, built as Django builds a row it loads
    (``Model.from_db``): every concrete field's value given by position, its default where
    ``values`` has none (positional arguments skip ``__init__``'s per-keyword work)."""
    if not set(values) <= _ATTNAMES:
        return Job(**values)  # not a column's name: Job raises as it does
    by_position: Any = [values[f.attname] if f.attname in values else f.get_default()
                        for f in _CONCRETE]
    return Job(*by_position)


def values_params(values: dict[str, Any], using: str, connection: Any = None) -> list[Any]:
    """The values of ``new_row(**values)`` as ``save()`` prepares them
    (``get_db_prep_save``), in the statement's column order, without building the row:
    each field's value from ``values``, else its default (a constant one prepared once
    per alias). A datetime
    given for two columns (due and scheduled, created and updated) is adapted once.
    ``values`` holds column names only (``new_row`` checks that for ``insert_values``).
    ``connection``: ``connections[using]``, when the caller has it."""
    return _fill(values, using, connection)[1]


def _fill(values: dict[str, Any], using: str, connection: Any,
          full: bool = True) -> tuple[_Plan, list[Any]]:
    """``values_params`` and the plan of ``values``' names; not ``full``: without the
    defaults the plan's statement writes as literals (``plan.each_literal``)."""
    st, names = _statement(using), tuple(values)
    connection = connection or connections[using]
    plan = st.plans.get(names) or _plan(names, st)
    out = plan.template.copy()
    # SQLite with USE_TZ and the connection in UTC: an aware UTC datetime is adapted as
    # its adapter would (``make_naive`` to UTC, then ``str``: its ISO text with a space,
    # without the offset), without the calls
    utc = st.sqlite and connection.timezone is UTC
    moments: dict[int, Any] = {}  # id of a datetime of ``values`` -> its adapted value
    for index, name, plain, prep, is_moment, null in plan.given:
        value = values[name]
        if value is None:
            out[index] = prep(value, connection) if null is _EACH_TIME else null
        elif type(value) is plain:
            out[index] = value
        elif not is_moment:
            out[index] = prep(value, connection)
        elif (done := moments.get(id(value))) is not None:
            out[index] = done
        elif utc and type(value) is datetime and value.tzinfo is UTC:
            out[index] = moments[id(value)] = value.isoformat(" ")[:-6]  # "+00:00" cut
        else:
            out[index] = moments[id(value)] = prep(value, connection)
    for index, name, prep in plan.each_time + plan.each_literal if full else plan.each_time:
        out[index] = prep(_FIELDS[name].get_default(), connection)
    return plan, out


# the sets of names callers give: schedule() leaves out the columns its call leaves at
# their defaults (eleven may be: an application uses a handful of sets); past this many a
# plan is made per call, not kept
_MAX_PLANS = 512


def _plan(names: tuple[str, ...], st: _Statement) -> _Plan:
    """The plan of these names, kept in ``st.plans`` (up to ``_MAX_PLANS`` of them)."""
    given = set(names)
    template: list[Any] = []
    filled: list[tuple[int, str, type | None, Prepare, bool, Any]] = []
    each_time: list[tuple[int, str, Prepare]] = []
    each_literal: list[tuple[int, str, Prepare]] = []
    # the statement of these names: a column whose value is the same constant on every
    # row (a default not given) written as an SQL literal when it is a plain one
    marks: list[str] = []
    bound: list[int] = []
    for index, (name, prep, default, is_moment, plain, null) in enumerate(st.by_name):
        template.append(None if name in given or default is _EACH_TIME else default)
        literal = None
        if name in given:
            filled.append((index, name, plain, prep, is_moment, null))
        elif default is _EACH_TIME and (literal := _empty_json(_FIELDS[name])) is not None:
            each_literal.append((index, name, prep))  # ``kwargs`` left out: ``{}``
        elif default is _EACH_TIME:
            each_time.append((index, name, prep))
        else:
            literal = _literal(default)
        if literal is None:
            bound.append(index)
        marks.append("%s" if literal is None else literal)
    plan = _Plan(template, tuple(filled), tuple(each_time), st.head + ", ".join(marks) + ")",
                 _getter(bound), tuple(each_literal))
    if len(st.plans) < _MAX_PLANS:
        st.plans[names] = plan
    return plan


def _empty_json(field: Field[Any, Any]) -> str | None:
    """The literal of an empty JSON object or array, for Django's own ``JSONField``
    without an encoder whose default is one (``default=dict``): what the driver would
    store for it (``'{}'``, ``'[]'``, the text ``json.dumps`` gives); else ``None``."""
    if type(field) is not JSONField or field.encoder is not None:
        return None
    empty = field.get_default()
    if empty == {} and type(empty) is dict:
        return "'{}'"
    return "'[]'" if empty == [] and type(empty) is list else None


def _literal(value: Any) -> str | None:
    """``value`` as an SQL literal that every backend reads as the driver's bound value
    would be stored (NULL, TRUE/FALSE, an int, a str of letters, digits and ``_``), else
    ``None``: it stays a parameter."""
    if value is None:
        return "NULL"
    if type(value) is bool:
        return "TRUE" if value else "FALSE"
    if type(value) is int:
        return str(value)
    if isinstance(value, str) and _SAFE_TEXT.fullmatch(value):
        return "'%s'" % str.__str__(value)  # a TextChoices member: its value
    return None


_SAFE_TEXT = re.compile("[A-Za-z0-9_]*")


def _getter(indexes: list[int]) -> Callable[[list[Any]], Sequence[Any]]:
    """The values at ``indexes`` of a row's values, in order (``itemgetter``, in C)."""
    if len(indexes) < 2:  # itemgetter of one index gives the value, of none raises
        return lambda out: [out[i] for i in indexes]
    return itemgetter(*indexes)


def insert_values(values: dict[str, Any], using: str, connection: Any = None) -> None:
    """``new_row(**values).save(force_insert=True, using=using)`` for a caller that needs
    no ``Job`` object (a ``schedule()`` without key or parents): the row ``save()`` would
    store, through the prepared statement. ``connection``: ``connections[using]``, when
    the caller has it."""
    if not _ONLY_PLAIN or not values.keys() <= _ATTNAMES:  # a column left to the database;
        new_row(**values).save(force_insert=True, using=using)  # Job raises for a bad name
        return
    if pre_init.has_listeners(Job) or post_init.has_listeners(Job):
        row = new_row(**values)  # its receivers see the Job (and may change it) as before
        values = {f.attname: getattr(row, f.attname) for f in _CONCRETE}  # save(): no save
    connection = connection or connections[using]
    plan, out = _fill(values, using, connection, full=False)
    with connection.cursor() as cursor:
        cursor.execute(plan.sql, plan.bound(out))


def insert_many(rows: Sequence[dict[str, Any]], using: str, *, ignore_conflicts: bool,
                batch_size: int) -> None:
    """``insert_values`` of many rows (``schedule_many``; no ``Job`` is built for a
    ``pre_init`` receiver): on PostgreSQL (psycopg 3) one COPY of every column, else one
    ``executemany`` per plan and ``batch_size`` rows; ``ignore_conflicts``: the INSERT
    skips a row whose id exists (then never COPY)."""
    connection = connections[using]
    if not rows:
        return
    if connection.vendor == "postgresql" and not ignore_conflicts and has_copy(connection):
        sql = "COPY %s FROM STDIN" % _statement(using).table  # several times faster
        with connection.cursor() as wrapper, wrapper.cursor.copy(sql) as copy:
            for values in rows:
                copy.write_row(_fill(values, using, connection)[1])
        return
    by_plan: dict[str, list[Sequence[Any]]] = {}
    for values in rows:
        plan, out = _fill(values, using, connection, full=False)
        by_plan.setdefault(plan.sql, []).append(plan.bound(out))
    ops, skip = connection.ops, OnConflict.IGNORE if ignore_conflicts else None
    with connection.cursor() as cursor:
        for plain, params in by_plan.items():  # INSERT OR IGNORE, ON CONFLICT DO NOTHING
            sql = "%s%s %s" % (ops.insert_statement(on_conflict=skip), plain[len("INSERT INTO"):],
                               ops.on_conflict_suffix_sql(_CONCRETE, skip, None, None))
            for i in range(0, len(params), batch_size):
                cursor.executemany(sql, params[i:i + batch_size])


def existing(using: str, ids: Collection[str], batch_size: int = 1000) -> set[str]:
    """Which of ``ids`` already have a row (SQLite: one query, the ids as a JSON array)."""
    conn = connections[using]
    ops = conn.ops
    sql = "SELECT %s FROM %s WHERE %s IN (%%s)" % (
        ops.quote_name("id"), ops.quote_name(Job._meta.db_table), ops.quote_name("id"))
    chunk = list(ids)
    found: set[str] = set()
    with conn.cursor() as cursor:
        if conn.vendor == "sqlite":
            cursor.execute(sql % "SELECT value FROM json_each(%s)", [json.dumps(chunk)])
            return {row[0] for row in cursor.fetchall()}
        size = min(batch_size, conn.features.max_query_params or batch_size)
        for i in range(0, len(chunk), size):
            part = chunk[i:i + size]
            cursor.execute(sql % ", ".join(["%s"] * len(part)), part)
            found.update(row[0] for row in cursor.fetchall())
    return found


def has_copy(connection: BaseDatabaseWrapper) -> bool:
    connection.ensure_connection()
    return hasattr(connection.connection, "pipeline")  # psycopg 3: cursor.copy() streams rows


# No column left to the database (``db_default`` without ``default``): the values of a
# new ``Job`` are then plain values a field can prepare.
_ONLY_PLAIN = not any(f.has_db_default() and not f.has_default()
                      for f in Job._meta.local_concrete_fields)
_CONCRETE = tuple(Job._meta.concrete_fields)
_ATTNAMES = frozenset(f.attname for f in _CONCRETE)
_FIELDS = {f.attname: f for f in Job._meta.local_concrete_fields}
