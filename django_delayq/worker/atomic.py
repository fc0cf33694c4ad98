"""Atomic jobs: the function's database writes and the attempt's success commit together.

A job scheduled with ``atomic=True`` runs inside one ``transaction.atomic()`` on the
database of its row (``db_for_write(Job)``). Before the block ends, ``commit`` writes the
attempt's success to the row with a fenced UPDATE::

    UPDATE job SET status = 'succeeded', attempts = <attempt>, result = ..., ...
     WHERE id = <id> AND attempts <= <attempt> AND status NOT IN (<final statuses>)

and resolves the job's waiting children (``core/workflows.py``) in the same transaction.
The commit is the point of no return. Before it nothing of the attempt is in the database:
an exception, a kill, a lost connection or a time limit rolls it all back and the job
retries as usual. After it the row is final, and no delivery calls the function again:

* **the fence lets one transaction make the row final.** Two deliveries of one job that
  run at once (a lease taken back during a stall, Redis restored from an old snapshot or
  restarted empty) both reach the UPDATE; the second waits for the first's row lock
  (PostgreSQL re-reads the row once the lock is free; SQLite has one writer at a time),
  finds the row final, and rolls back (``NotOurs``). A delivery whose lease a later
  attempt took over (the row records that attempt) is refused the same way;
* **a delivery after the commit reads the row before the call** (``committed``: one
  primary-key read, inside its transaction once it holds it: on SQLite after the write
  lock, which a delivery waits for while another's transaction runs) and settles the job
  as succeeded without calling the function, counting no run; a claim that reads the row
  final sets the job aside (``core/payloads.py``).

The job's ``report_progress()`` values are written in the transaction too (the last one,
when the function returns: ``core/progress.py``, ``in_attempt``): seen at the commit, gone
with a rollback, and never written on another connection, which on SQLite would wait for
this transaction's write lock while the attempt waits for the write.

The audit writer's later write of the same success finds the row final and changes
nothing (it never overwrites a final row). Only writes through the row's database
connection are in the transaction: another database, an e-mail, an HTTP call, or the
database calls an ``async def`` function makes from other threads are not (``schedule()``
refuses ``atomic=True`` for those functions).

Cost per attempt: the primary-key read, and one UPDATE that also answers whether the job
has children waiting (``RETURNING EXISTS``: ``workflows.resolve`` runs only then), both
as raw SQL (the ORM's compilation cost more than the queries). On SQLite a transaction
that writes holds the database's write lock to its end (from its start in Django's
``IMMEDIATE`` transaction mode), so atomic jobs run one at a time whatever happens here;
the threads of one process take their turns through a lock of the process
(``_sqlite_turns``) rather than through SQLite's busy handler, which polls with sleeps of
up to 100 ms.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections, router, transaction

from django_delayq.core import progress, workflows
from django_delayq.models import (
    FINAL_SQL,
    JOB_COLUMNS,
    Job,
    JobDependency,
    JobStatus,
    db_datetime,
)
from django_delayq.worker.outcome import storable

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper


@dataclass(frozen=True, slots=True)
class Committed:
    """The success a delivery of the job committed."""

    attempt: int
    result: Any


class NotOurs(Exception):
    """The fence refused the success: the attempt is rolled back. ``committed`` is the
    success another delivery committed, ``None`` when a later attempt holds the row (this
    lease was lost) or the row is final otherwise."""

    def __init__(self, committed: Committed | None) -> None:
        super().__init__("the job's row is no longer this attempt's")
        self.committed = committed


def committed(job_id: str, using: str | None = None) -> Committed | None:
    """The success committed for ``job_id``, or ``None`` (one primary-key read)."""
    conn = connections[using or router.db_for_write(Job)]
    qn = conn.ops.quote_name
    attempts, result, pk, status = (qn(JOB_COLUMNS[name])
                                    for name in ("attempts", "result", "id", "status"))
    with conn.cursor() as cursor:
        cursor.execute("SELECT %s, %s FROM %s WHERE %s = %%s AND %s = %%s" % (
            attempts, result, qn(Job._meta.db_table), pk, status),
            [job_id, JobStatus.SUCCEEDED.value])
        row = cursor.fetchone()
    if row is None:
        return None
    value = row[1]  # the JSON column's text (SQLite; PostgreSQL through Django's loaders)
    return Committed(attempt=row[0], result=json.loads(value) if isinstance(value, str) else value)


_sqlite_turns = threading.RLock()  # one atomic transaction at a time per process on SQLite


@contextmanager
def transaction_of() -> Iterator[str]:
    """The attempt's transaction on the job rows' database; yields its alias."""
    using = router.db_for_write(Job)  # the database of the job rows
    turn: AbstractContextManager[Any] = (
        _sqlite_turns if connections[using].vendor == "sqlite" else nullcontext())
    with turn, transaction.atomic(using=using), progress.in_attempt(using):
        yield using  # the job's progress written in it (``core/progress.py``)


def commit(using: str, job_id: str, attempt: int, *, worker_id: str, started_at: datetime,
           finished_at: datetime, result: Any) -> None:
    """Write the success of attempt number ``attempt`` into the open transaction (fenced, see the
    module docstring) and resolve the job's waiting children; ``NotOurs`` when the fence
    refuses (the caller's ``with transaction_of()`` then rolls everything back)."""
    conn = connections[using]

    def moment(value: datetime) -> Any:  # as the ORM writes it (the audit writer's too)
        return conn.ops.adapt_datetimefield_value(db_datetime(value))

    params: list[Any] = [JobStatus.SUCCEEDED.value, attempt, moment(started_at),
                         moment(finished_at), None if result is None else json.dumps(result),
                         storable(worker_id), moment(finished_at), job_id, attempt]
    returning = conn.vendor == "postgresql" or (
        conn.vendor == "sqlite" and conn.features.can_return_columns_from_insert)
    with conn.cursor() as cursor:
        cursor.execute(_success_sql(conn, returning), params + ([job_id] if returning else []))
        if returning:  # one round trip: the write and whether the job has open edges
            row = cursor.fetchone()
            written, children = row is not None, row is not None and bool(row[0])
        else:
            written, children = cursor.rowcount == 1, True
    if not written:
        raise NotOurs(committed(job_id, using))
    if children:  # its waiting children: released or cancelled in this transaction
        workflows.resolve([job_id], using)


_EDGE_COLUMNS = {f.name: str(f.column) for f in JobDependency._meta.concrete_fields}


def _success_sql(conn: BaseDatabaseWrapper, returning: bool) -> str:
    """The fenced UPDATE of ``commit``; with ``returning``, it also answers whether the job
    has edges to children not resolved yet (the probe ``workflows.resolve`` makes)."""
    def col(name: str, columns: dict[str, str] = JOB_COLUMNS) -> str:
        return str(conn.ops.quote_name(columns[name]))

    sets = ", ".join("%s = %%s" % col(name) for name in (
        "status", "attempts", "started_at", "finished_at", "result", "worker_id", "updated_at"))
    sql = "UPDATE %s SET %s WHERE %s = %%s AND %s <= %%s AND %s NOT IN (%s)" % (
        conn.ops.quote_name(Job._meta.db_table), sets, col("id"), col("attempts"),
        col("status"), FINAL_SQL)
    if returning:
        sql += " RETURNING EXISTS (SELECT 1 FROM %s WHERE %s = %%s AND NOT %s)" % (
            conn.ops.quote_name(JobDependency._meta.db_table), col("parent_id", _EDGE_COLUMNS),
            col("resolved", _EDGE_COLUMNS))
    return sql
