"""Job functions of the atomic-job tests and bench/atomic_chaos.py.

``bump`` adds one to a counter row and inserts a row keyed by its job id, in the tables
``create_tables`` makes: an atomic job's writes commit once, a plain job's once per run
that got that far. The key rows have no unique constraint, so a second run shows as a
second row instead of failing.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.db import connection

from django_delayq import atomic_job, current_job

TABLES = (
    "CREATE TABLE IF NOT EXISTS atomic_counter (name VARCHAR(50) PRIMARY KEY, "
    "n INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS atomic_effect (job_id VARCHAR(26) NOT NULL, "
    "attempt INTEGER NOT NULL, counter VARCHAR(50) NOT NULL)",
    "CREATE INDEX IF NOT EXISTS atomic_effect_job ON atomic_effect (job_id)",
)


def create_tables(counters: list[str] | tuple[str, ...] = ()) -> None:
    """The tables, emptied, with ``counters`` at 0."""
    with connection.cursor() as cursor:
        for sql in TABLES:
            cursor.execute(sql)
        cursor.execute("DELETE FROM atomic_effect")
        cursor.execute("DELETE FROM atomic_counter")
        for name in counters:
            cursor.execute("INSERT INTO atomic_counter (name, n) VALUES (%s, 0)", [name])


def bump(counter: str, seconds: float = 0.0) -> str:
    """Add one to ``counter``, insert this job's key row, then take ``seconds`` (a kill
    lands between the writes and their commit)."""
    ctx = current_job()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE atomic_counter SET n = n + 1 WHERE name = %s", [counter])
        cursor.execute("INSERT INTO atomic_effect (job_id, attempt, counter) VALUES (%s, %s, %s)",
                       [ctx.id if ctx else "-", ctx.attempt if ctx else 0, counter])
    time.sleep(seconds)
    return counter


def bump_then_fail(counter: str) -> None:
    """The writes of ``bump``, then an exception: an atomic job's writes roll back."""
    bump(counter)
    raise ValueError("failed after its writes")


def bump_big(counter: str, size: int) -> str:
    """The writes of ``bump``, then a result of ``size`` characters."""
    bump(counter)
    return "x" * size


@atomic_job
def always_atomic(counter: str) -> str:
    return bump(counter)


@atomic_job
async def async_marked() -> None:
    return None


async def async_plain() -> None:
    return None


def counters() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, n FROM atomic_counter")
        return dict(cursor.fetchall())


def effects() -> dict[str, int]:
    """Key rows per job id."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT job_id, COUNT(*) FROM atomic_effect GROUP BY job_id")
        return dict(cursor.fetchall())


def summary(ids: Any) -> tuple[int, int]:
    """(jobs whose key row is missing, extra key rows) over ``ids``."""
    found = effects()
    return (sum(1 for i in ids if i not in found),
            sum(n - 1 for i, n in found.items() if i in ids and n > 1))


CALLS: list[int] = []  # the attempts that called ``bump_held`` in this process
HELD = threading.Event()  # set by its first call, inside its transaction
RELEASE = threading.Event()  # lets its first call return


def bump_held(counter: str) -> str:
    """``bump``, each call noted in ``CALLS``; the first call then holds its transaction
    open (``HELD``) until the test sets ``RELEASE``."""
    ctx = current_job()
    CALLS.append(ctx.attempt if ctx else 0)
    bump(counter)
    if len(CALLS) == 1:
        HELD.set()
        RELEASE.wait(60)
    return counter
