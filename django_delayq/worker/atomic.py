"""Atomic jobs: the function's database writes and the attempt's success commit together.

A job scheduled with ``atomic=True`` runs inside one ``transaction.atomic()`` on the
database of its row (``db_for_write(Job)``). Before the block ends, ``commit`` writes the
attempt's success to the row with a fenced UPDATE::

    UPDATE job SET status = 'succeeded', attempts = <token>, result = ..., ...
     WHERE id = <id> AND attempts <= <token> AND status NOT IN (<final statuses>)

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
  primary-key read) and settles the job as succeeded without calling the function; a
  claim that reads the row final sets the job aside (``core/payloads.py``).

The audit writer's later write of the same success finds the row final and changes
nothing (it never overwrites a final row).

On SQLite a transaction that writes holds the database's write lock to its end (Django's
``IMMEDIATE`` mode takes it at the start), so atomic jobs run one at a time whatever
happens here; the threads of one process take their turns through a lock of the process
(``_sqlite_turns``) rather than through SQLite's busy handler, which sleeps in steps of
up to 100 ms and made four threads of no-op atomic jobs drain at a fraction of the rate. Only writes through the row's database
connection are in the transaction: another database, an e-mail, an HTTP call, or the
database calls an ``async def`` function makes from other threads are not (``schedule()``
refuses ``atomic=True`` for those functions).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections, router, transaction

from django_delayq.core import workflows
from django_delayq.models import FINAL_STATUSES, Job, JobStatus
from django_delayq.worker.audit import storable


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


def database() -> str:
    """The database of the job rows: the one an atomic job's transaction runs on."""
    return router.db_for_write(Job)


def committed(job_id: str, using: str | None = None) -> Committed | None:
    """The success committed for ``job_id``, or ``None`` (one primary-key read)."""
    row = (Job.objects.using(using or database())
           .filter(pk=job_id, status=JobStatus.SUCCEEDED)
           .values_list("attempts", "result").first())
    return None if row is None else Committed(attempt=row[0], result=row[1])


_sqlite_turns = threading.Lock()  # one atomic transaction at a time per process on SQLite


@contextmanager
def transaction_of() -> Iterator[str]:
    """The attempt's transaction on the job rows' database; yields its alias."""
    using = database()
    turn: AbstractContextManager[Any] = (
        _sqlite_turns if connections[using].vendor == "sqlite" else nullcontext())
    with turn, transaction.atomic(using=using):
        yield using


def roll_back(using: str) -> None:
    """End the attempt's transaction without committing anything of it."""
    transaction.set_rollback(True, using=using)


def commit(using: str, job_id: str, token: int, *, worker_id: str, started_at: datetime,
           finished_at: datetime, result: Any) -> None:
    """Write the success of attempt ``token`` into the open transaction (fenced, see the
    module docstring) and resolve the job's waiting children; ``NotOurs`` when the fence
    refuses (the caller's ``with transaction_of()`` then rolls everything back)."""
    written = (Job.objects.using(using)
               .filter(pk=job_id, attempts__lte=token)
               .exclude(status__in=FINAL_STATUSES)
               .update(status=JobStatus.SUCCEEDED, attempts=token, started_at=started_at,
                       finished_at=finished_at, result=result,
                       worker_id=storable(worker_id), updated_at=finished_at))
    if not written:
        raise NotOurs(committed(job_id, using))
    workflows.resolve([job_id], using)
