"""Final rows written before Redis settles: a finished job's outcome must not die with its
worker while Redis cannot be reached.

A job's row is normally written after Redis settled it (``settle.py``: Redis decides
first). While Redis cannot be reached, its outcome is held in memory only, and a kill of
the worker then (a drain that cannot settle, SIGKILLed) loses it: the lease lapses, and
another worker recovers the job and runs it again, although its run ended before the
process died. So when a settling round cannot reach Redis, the outcomes that end the job
for good (a success; a failure with no retry: ``dead``) get their final row now
(``write``): the row the settlement would write (status, attempt, times, result or error,
worker; a failure's ``JobAttempt``), through the audit writer's own write (``AuditWriter.
write_now``), fenced as every audit write is: ``WHERE id = ... AND attempts <= <attempt>
AND status NOT IN (<final>)`` (never over a later attempt's record, never over a final
row), the job's waiting children resolved in the same transaction.

Only while the job's lease is still this worker's by its own estimate (``Ledger.
lease_left``, counted from the send of its last accepted extend) with ``margin`` seconds
left: nobody takes a job back before its lease lapsed, so no other delivery of it has run
or can have claimed it before the row is final, and one that claims it later finds the
row final and sets it aside (``handover.py``); the reconciler leaves final rows alone. A
lease that may have passed gets no early row: another delivery may hold the job.

One write per outcome (``Outcome.row_final``; a write the database refused is tried in a
later round while the lease allows). Nothing else happens early: Redis is still tried as
before, and when it settles the job, the usual record follows (the signals, the log
lines, the row change, which finds the row final and changes nothing, the settled record
forgotten); the ``JobAttempt`` of a failure is not written a second time. Nothing of this
runs while Redis answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections, router

from django_delayq.engine.logtext import shown
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.audit import DATA_ERRORS
from django_delayq.worker.outcome import Kind, Outcome

if TYPE_CHECKING:
    from django_delayq.engine.outcomes import ClaimedJob
    from django_delayq.worker.audit import AuditWriter

logger = logging.getLogger(__name__)

FINAL_KINDS = {Kind.SUCCESS: JobStatus.SUCCEEDED, Kind.DEAD: JobStatus.DEAD}


def margin_s(lease_ms: int) -> float:
    """Seconds of lease an outcome's job must have left for its early row: a fifth of the
    lease, at most 2 s (the time the write itself may take)."""
    return min(2.0, lease_ms / 5000)


def write(audit: AuditWriter, outcomes: Iterable[Outcome], worker_id: str,
          lease_left: Callable[[ClaimedJob], float], margin: float) -> int:
    """Write the final rows of those ``outcomes`` of runs that end their job
    (``FINAL_KINDS``; not those decided without running it) not written yet, whose lease
    has more than ``margin`` seconds left; returns how many. A database error is logged
    (they are tried again in a later round)."""
    todo = [o for o in outcomes if o.kind in FINAL_KINDS and o.ran and not o.row_final]
    todo = [o for o in todo if lease_left(o.job) > margin]
    if not todo:
        return 0
    changes = {o.job.id: final_fields(o, worker_id) for o in todo}
    attempts = [JobAttempt(job_id=o.job.id, number=o.job.attempt, outcome=JobStatus.DEAD,
                           started_at=o.started_at, finished_at=o.finished_at,
                           error_type=o.error_type, error=o.error, traceback=o.traceback,
                           worker_id=worker_id) for o in todo if o.kind is Kind.DEAD]
    try:
        connections[router.db_for_write(Job)].close_if_unusable_or_obsolete()
        audit.write_now(changes, attempts)
    except (DatabaseError, *DATA_ERRORS) as exc:
        logger.warning("Redis unreachable: could not write the final rows of %d finished "
                       "job(s) before it settles them: %s", len(todo), shown(exc))
        return 0
    for o in todo:
        o.row_final = True
    logger.info("Redis unreachable: final rows of %d finished job(s) written before Redis "
                "settles them (%s)", len(todo), ", ".join(shown(o.job.id) for o in todo[:5]))
    return len(todo)


def final_fields(o: Outcome, worker_id: str) -> dict[str, Any]:
    """The row change the settlement records for ``o`` (``Settler._record``)."""
    fields: dict[str, Any] = {
        "status": FINAL_KINDS[o.kind], "started_at": o.started_at,
        "finished_at": o.finished_at, "attempts": o.job.attempt, "worker_id": worker_id,
        "updated_at": o.finished_at}
    if o.kind is Kind.SUCCESS:
        fields["result"] = o.result
    else:
        fields.update(error_type=o.error_type, last_error=o.error, traceback=o.traceback)
    return fields
