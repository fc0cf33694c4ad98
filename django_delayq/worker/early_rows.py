"""Final rows written before Redis settles: a finished job's outcome must not die with its
worker while Redis cannot be reached.

A job's row is normally written after Redis settled it (``settle.py``: Redis decides
first). While Redis cannot be reached, its outcome is held in memory only, and a kill of
the worker then (a drain that cannot settle, SIGKILLed) loses it: the lease lapses, and
another worker recovers the job and runs it again, although its run ended before the
process died. So when a settling round cannot reach Redis, it hands the outcomes that end
the job for good (a success; a failure with no retry: ``dead``) to ``EarlyRows``, whose
own thread writes their final rows: the row the settlement would write (status, attempt,
times, result or error, worker; a failure's ``JobAttempt``), through the audit writer's own
write (``AuditWriter.write_now``), fenced as every audit write is: ``WHERE id = ... AND
attempts <= <attempt> AND status NOT IN (<final>)`` (never over a later attempt's record,
never over a final row), the job's waiting children resolved in the same transaction. The
settling thread never waits for the database: its acks go on during a database stall.

Only while the job's lease is still this worker's by its own estimate (``Ledger.
lease_left``, counted from the send of its last accepted extend) with ``margin`` seconds
left, checked at the commit (``Fence``): before the transaction, first in it and after its
UPDATEs, each time bounding the waits that follow by the lease left less the margin
(PostgreSQL's ``lock_timeout`` and ``statement_timeout``, SQLite's busy timeout), and
rolling the transaction back when a job's lease has no more than the margin left (the
others are written again without it). Nobody takes a job back before its lease lapsed, so
when the row becomes final no other delivery of it has run or holds it, and one that
claims it later finds the row final and sets it aside (``handover.py``); the reconciler
leaves final rows alone. A job whose lease may have passed gets no early row, however
long its write waited: another delivery may hold the job.

One write per outcome (``Outcome.row_final``; a write the database refused is tried again
every ``RETRY_SECONDS`` while the lease allows); an outcome Redis settled meanwhile is not
written (the usual record does). Nothing else happens early: Redis is still tried as
before, and when it settles the job, the usual record follows (the signals, the log
lines, the row change, which finds the row final and changes nothing, the settled record
forgotten); the ``JobAttempt`` of a failure is not written a second time. Nothing of this
runs while Redis answers.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections, router

from django_delayq.engine.logtext import shown
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.audit import DATA_ERRORS
from django_delayq.worker.outcome import Kind, Outcome, row_fields

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from django_delayq.worker.audit import AuditWriter
    from django_delayq.worker.ledger import Ledger

logger = logging.getLogger(__name__)

FINAL_KINDS = {Kind.SUCCESS: JobStatus.SUCCEEDED, Kind.DEAD: JobStatus.DEAD}


class LeaseGone(Exception):
    """An early write rolled back: the leases of ``ids`` have no more than the margin left
    (or Redis settled them meanwhile: the usual record writes their rows)."""

    def __init__(self, ids: list[str]) -> None:
        super().__init__("lease of %d job(s) may pass before the commit" % len(ids))
        self.ids = ids


class Fence:
    """The lease check of an early write of ``outcomes`` (``AuditWriter.write_now``) by
    ``rows``: raises ``LeaseGone`` when a job's lease has no more than ``rows.margin``
    seconds left (``rows.lease_left``) or Redis settled it meanwhile (``rows.unsettled``),
    else bounds the database's waits that follow by what is left of the shortest."""

    def __init__(self, outcomes: list[Outcome], rows: EarlyRows) -> None:
        self.outcomes, self.rows = outcomes, rows

    def __call__(self, conn: BaseDatabaseWrapper) -> None:
        left = {o.job.id: self.rows.lease_left(o.job) - self.rows.margin for o in self.outcomes}
        # settled meanwhile: recorded the usual way
        held = {id(o) for o in self.rows.unsettled(self.outcomes)}
        left.update((o.job.id, 0.0) for o in self.outcomes if id(o) not in held)
        if gone := [job_id for job_id, s in left.items() if not s > 0]:
            raise LeaseGone(gone)
        ms = str(max(1, int(min(*left.values(), 3600.0) * 1000)))
        if conn.vendor == "sqlite":  # its lock is taken as the transaction begins
            with conn.cursor() as cursor:
                cursor.execute("PRAGMA busy_timeout = %s" % ms)
        elif conn.vendor == "postgresql" and conn.in_atomic_block:
            with conn.cursor() as cursor:  # for this transaction only
                cursor.execute("SELECT set_config('lock_timeout', %s, true), "
                               "set_config('statement_timeout', %s, true)", [ms, ms])

    @staticmethod
    def reset(conn: BaseDatabaseWrapper) -> None:
        """SQLite: the connection's own busy timeout again."""
        if conn.vendor == "sqlite" and conn.connection is not None:
            timeout = conn.settings_dict.get("OPTIONS", {}).get("timeout", 5)
            with contextlib.suppress(DatabaseError), conn.cursor() as cursor:
                cursor.execute("PRAGMA busy_timeout = %d" % int(timeout * 1000))


class EarlyRows:
    """The writer of the early rows: ``submit`` hands it the outcomes of a settling round
    that could not reach Redis (never waits); its thread (``start``, ``stop``) writes
    those that end their job (``FINAL_KINDS``, not those decided without running it) while
    Redis has not settled them (``unsettled``) and their leases allow (``write``)."""

    RETRY_SECONDS = 0.2

    def __init__(self, audit: AuditWriter, worker_id: str, ledger: Ledger, lease_ms: int) -> None:
        self.audit, self.worker_id = audit, worker_id
        # the ledger's: a job's lease left by this worker's estimate, and which outcomes
        # Redis has not settled yet
        self.lease_left, self.unsettled = ledger.lease_left, ledger.unsettled
        # seconds of lease an outcome's job must have left for its early row: a fifth of
        # the lease, at most 2 s (the time the write itself may take)
        self.margin = min(2.0, lease_ms / 5000)
        self._pending: dict[int, Outcome] = {}
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def submit(self, outcomes: Iterable[Outcome]) -> None:
        todo = [o for o in outcomes if o.kind in FINAL_KINDS and o.ran and not o.row_final]
        if todo:
            with self._cond:
                self._pending.update((id(o), o) for o in todo)
                self._cond.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="delayq-early-rows", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """One last try at what is pending (its waits bounded by the leases), then end."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._stopping:
                    self._cond.wait(self.RETRY_SECONDS if self._pending else None)
                stopping = self._stopping
            self.write_pending()
            if stopping:
                connections.close_all()  # this thread's own connections
                return

    def write_pending(self) -> int:
        """Write what is pending and may be (``write``); drop what is written, settled by
        Redis, or out of lease. Never raises."""
        with self._cond:
            taken = list(self._pending.values())
        written = 0
        if todo := self.unsettled(taken):
            try:
                written = self.write(todo)
            except Exception:  # noqa: BLE001 - the usual record follows once Redis settles
                logger.exception("writing the final rows of %d finished job(s) failed",
                                 len(todo))
        keep = {id(o) for o in todo if not o.row_final and self.lease_left(o.job) > self.margin}
        with self._cond:  # those submitted meanwhile stay for the next round
            for o in taken:
                if id(o) not in keep:
                    self._pending.pop(id(o), None)
        return written

    def write(self, outcomes: list[Outcome]) -> int:
        """Write the final rows of ``outcomes`` whose lease has more than ``margin`` seconds
        left, and still has at their commit (``Fence``: those whose lease has gone are left
        out, the others written again; so are those Redis settled meanwhile: ``unsettled``);
        returns how many. A database error is logged (they are tried again later)."""
        todo = [o for o in outcomes if self.lease_left(o.job) > self.margin]
        conn = connections[router.db_for_write(Job)]
        try:
            while todo:
                try:
                    self._write_now(todo, Fence(todo, self), conn)
                    break
                except LeaseGone as gone:
                    logger.warning("Redis unreachable: no early final row for %d finished "
                                   "job(s) whose lease may pass before its commit, or that "
                                   "Redis settled meanwhile (%s)",
                                   len(gone.ids), ", ".join(shown(i) for i in gone.ids[:5]))
                    todo = [o for o in todo if o.job.id not in gone.ids]
        except (DatabaseError, *DATA_ERRORS) as exc:
            logger.warning("Redis unreachable: could not write the final rows of %d finished "
                           "job(s) before it settles them: %s", len(todo), shown(exc))
            return 0
        finally:
            Fence.reset(conn)
        for o in todo:
            o.row_final = True
        if todo:
            logger.info("Redis unreachable: final rows of %d finished job(s) written before "
                        "Redis settles them (%s)", len(todo),
                        ", ".join(shown(o.job.id) for o in todo[:5]))
        return len(todo)

    def _write_now(self, todo: list[Outcome], fence: Fence, conn: BaseDatabaseWrapper) -> None:
        changes = {o.job.id: final_fields(o, self.worker_id) for o in todo}
        attempts = [JobAttempt(job_id=o.job.id, number=o.job.attempt, outcome=JobStatus.DEAD,
                               started_at=o.started_at, finished_at=o.finished_at,
                               error_type=o.error_type, error=o.error, traceback=o.traceback,
                               worker_id=self.worker_id) for o in todo if o.kind is Kind.DEAD]
        conn.close_if_unusable_or_obsolete()
        self.audit.write_now(changes, attempts, fence)


def final_fields(o: Outcome, worker_id: str) -> dict[str, Any]:
    """The row change the settlement records for ``o`` (``Settler._record``)."""
    fields = row_fields(o, FINAL_KINDS[o.kind], worker_id)
    if o.kind is Kind.SUCCESS:
        fields["result"] = o.result
    else:
        fields.update(error_type=o.error_type, last_error=o.error, traceback=o.traceback)
    return fields
