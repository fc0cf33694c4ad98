"""A job's audit row inserted with one prepared statement, without the ORM's per-call
query compilation (``Model.save()`` rebuilds the INSERT and asks for RETURNING on every
call: about half of ``schedule()``'s time on SQLite).

The statement lists every concrete column of ``Job`` (built once per database alias and
kept); values go through each field's ``get_db_prep_save``, as ``save()`` does, so JSON
and datetimes are stored exactly as the ORM stores them. ``Job`` has no ``pre_save`` work
(no ``auto_now``) and no save signals are sent: ``schedule()`` sends its own.
"""

from __future__ import annotations

from typing import Any

from django.db import connections
from django.db.models import Field

from django_delayq.models import Job

_statements: dict[str, tuple[str, list[Field[Any, Any]]]] = {}


def _statement(using: str) -> tuple[str, list[Field[Any, Any]]]:
    found = _statements.get(using)
    if found is None:
        qn = connections[using].ops.quote_name
        fields: list[Field[Any, Any]] = list(Job._meta.local_concrete_fields)
        sql = "INSERT INTO %s (%s) VALUES (%s)" % (
            qn(str(Job._meta.db_table)), ", ".join(qn(str(f.column)) for f in fields),
            ", ".join(["%s"] * len(fields)))
        found = _statements[using] = (sql, fields)
    return found


def _plain_values_only() -> bool:
    """No column left to the database (``db_default`` without ``default``): the values
    of a new ``Job`` are then plain values a field can prepare."""
    return not any(f.has_db_default() and not f.has_default()
                   for f in Job._meta.local_concrete_fields)


def insert(row: Job, using: str) -> None:
    """INSERT ``row`` (a new job: an existing id raises ``IntegrityError``)."""
    if not _PLAIN:
        row.save(force_insert=True, using=using)
        return
    sql, fields = _statement(using)
    connection = connections[using]
    params = [f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    row._state.adding = False
    row._state.db = using


_PLAIN = _plain_values_only()
