"""The send to Redis of jobs scheduled one at a time, gathered per transaction.

``schedule()`` called N times in one transaction registers one ``on_commit`` hook, not N:
each call appends its job to the hook registered last when that hook is a batch of the
same savepoint level, so after commit each queue gets one ``Engine.enqueue`` (split by the
engine into script calls of ``scripts.MAX_ENQUEUE`` jobs). A batch registered inside a
savepoint is dropped with it by Django when that savepoint rolls back, so Redis never
receives a job whose row was rolled back. In autocommit the row is committed when
``schedule()`` inserts it: the job is sent at once, without an ``on_commit`` hook.

Every job sent at commit goes this way (``schedule()``, ``schedule_many()``, children a
workflow releases). Sending is ``core/sender.py``'s: inline by default, or from a
background thread; a failed send leaves the rows for the reconciler (the outbox).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from django_delayq.core import sender, submit
from django_delayq.engine import NewJob


class _Batch:
    """The jobs one ``on_commit`` hook sends, by queue (in the order they were given);
    ``slot``: the hook's index in the connection's ``run_on_commit`` list."""

    __slots__ = ("jobs", "slot")

    def __init__(self, queue: str, jobs: list[NewJob], slot: int) -> None:
        self.jobs: dict[str, list[NewJob]] = {queue: list(jobs)}
        self.slot = slot

    def send(self) -> None:
        jobs, self.jobs = self.jobs, {}  # the connection keeps the batch: not its jobs
        for queue, queued in jobs.items():
            sender.send(queue, queued)


_ATTR = "_delayq_commit_batch"  # on the connection: the batch registered last


def _open_batch(conn: Any) -> _Batch | None:
    """The connection's batch if its hook is still registered at the current savepoint
    level (a rollback or a commit since then removed it: Django rebuilds the list)."""
    batch: _Batch | None = getattr(conn, _ATTR, None)
    hooks = conn.run_on_commit
    if batch is None or not conn.in_atomic_block or batch.slot >= len(hooks):
        return None
    sids, fn, _ = hooks[batch.slot]
    if getattr(fn, "__self__", None) is not batch or sids != set(conn.savepoint_ids):
        return None
    return batch


def enqueue_after_commit(using: str, queue: str, jobs: list[NewJob]) -> None:
    """Send ``jobs`` to Redis once the transaction of ``using`` commits (at once in
    autocommit), sharing one hook with the jobs scheduled before them in that transaction."""
    if not jobs:
        return
    conn = transaction.get_connection(using)
    if not conn.in_atomic_block and conn.get_autocommit():  # the rows are committed already
        sender.send(queue, jobs)
        return
    batch = _open_batch(conn)
    if batch is not None:
        batch.jobs.setdefault(queue, []).extend(jobs)
        return
    batch = _Batch(queue, jobs, len(conn.run_on_commit))
    if conn.in_atomic_block:
        setattr(conn, _ATTR, batch)
    submit.after_commit(using, batch.send)
