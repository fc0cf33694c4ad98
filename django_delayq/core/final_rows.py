"""Rows of jobs final in Redis: the reconciler settles them instead of re-enqueueing.

A live row whose job has a settled record in Redis (``Engine.ack``/``nack`` with a
holder: succeeded, expired, or cancelled while it ran) was settled by a worker whose
audit row has not landed: while that worker heartbeats its flush is coming (a stalled
database delays it, nothing more); once it is silent the row is settled from the record
(status, attempt, when), without the result or error text the worker kept, and the job
is not run again.

A live row whose id is in the dead set (a final nack or a lease recovery out of
attempts reached Redis; the worker died before its audit flush) is settled ``dead``
after the reconciler's second look: attempts from Redis's counter, the reason
``DEAD_IN_REDIS`` and a ``JobAttempt``. A ``running`` row whose cancel was asked and
whose job is gone is settled ``cancelled`` (the cancel forbade another run). Neither is
counted as "held": such a row would otherwise stay live forever. The update is
conditional on the row being unchanged, so a late flush of a live worker wins.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django.db import router, transaction
from django.utils import timezone

from django_delayq import signals
from django_delayq.core import reconcile_state, workflows
from django_delayq.exceptions import WorkerLost, type_path
from django_delayq.models import Job, JobAttempt, JobStatus

if TYPE_CHECKING:
    from django_delayq.engine import Engine
    from django_delayq.engine.outbox import Presence, Settled

logger = logging.getLogger(__name__)

DEAD_IN_REDIS = "ended dead in Redis; its worker stopped before recording it"
WORKER_LOST = type_path(WorkerLost)  # the error_type of such a row: its own error is lost
CANCELLED_IN_REDIS = ("cancelled while it ran; its worker stopped before recording the end")
SUCCEEDED_IN_REDIS = ("succeeded; its worker stopped before recording it (its result was "
                      "not kept)")
EXPIRED_IN_REDIS = "expired before it ran; its worker stopped before recording it"
SETTLED_KEEP_MS = 24 * 3600 * 1000  # settled records older than this are dropped
_FROM_RECORD = {"s": (JobStatus.SUCCEEDED, SUCCEEDED_IN_REDIS),
                "x": (JobStatus.EXPIRED, EXPIRED_IN_REDIS),
                "c": (JobStatus.CANCELLED, CANCELLED_IN_REDIS)}


@dataclass(frozen=True, slots=True)
class Finding:
    """A live row whose job Redis does not hold (``dead`` False) or holds as dead, and
    where Redis holds it."""

    row: Job
    place: Presence

    @property
    def settled(self) -> Settled | None:
        """A worker settled it; its audit row has not landed."""
        return self.place.settled

    @property
    def dead(self) -> bool:  # a settled record tells more
        return self.place.dead and self.place.settled is None

    @property
    def owner(self) -> str:
        """The worker whose audit flush may still write this row ("" when none): the one
        that settled the job in Redis, else the one a running row names."""
        if self.settled is not None:
            return self.settled.holder
        return self.row.worker_id if self.row.status == JobStatus.RUNNING else ""

    @property
    def settles(self) -> bool:
        """Final in Redis: the row is settled, the job not run again."""
        return self.dead or self.settled is not None or (
            self.row.status == JobStatus.RUNNING and self.row.cancel_requested)


def settle(found: list[Finding], engine: Engine) -> int:
    """Rows of jobs final in Redis become final too: dead (with a ``JobAttempt``),
    cancelled, or as their settled record says. Conditional on the row being unchanged
    since it was read; returns how many were settled. The settled records of the rows
    written go (through ``engine``)."""
    count = sum(settle_one(f) for f in found)
    recorded = reconcile_state.by_queue([f.row for f in found if f.settled is not None])
    for queue, rows in recorded.items():  # the rows say it now
        engine.forget_settled(queue, [r.pk for r in rows], keep_ms=SETTLED_KEEP_MS)
    return count


def settle_one(f: Finding) -> bool:
    """Settle one row; False when the row changed meanwhile (a late flush wins)."""
    row, now = f.row, timezone.now()
    if f.settled is not None and not f.dead:
        status, reason = _FROM_RECORD[f.settled.code]
        expired = status == JobStatus.EXPIRED  # the attempt it was claimed for never started
        number = max(f.settled.attempt - 1 if expired else f.settled.attempt, row.attempts)
        finished = datetime.fromtimestamp(f.settled.at_ms / 1000, UTC)
    elif f.dead:
        status, reason, number = JobStatus.DEAD, DEAD_IN_REDIS, max(row.attempts,
                                                                     f.place.attempts, 1)
        died = f.place.died_ms
        finished = datetime.fromtimestamp(died / 1000, UTC) if died else now
    else:
        status, reason, number, finished = (JobStatus.CANCELLED, CANCELLED_IN_REDIS,
                                            row.attempts, now)
    using = router.db_for_write(Job)
    with transaction.atomic(using=using):
        changed = Job.objects.using(using).filter(
            pk=row.pk, status=row.status, updated_at=row.updated_at,
            attempts__lte=number).update(status=status, attempts=number,
                                         finished_at=finished, last_error=reason,
                                         error_type=WORKER_LOST if f.dead else "",
                                         traceback="", updated_at=now,
                                         worker_id=f.settled.holder if f.settled else row.worker_id)
        if changed and status == JobStatus.DEAD:
            JobAttempt.objects.using(using).create(job_id=row.pk, number=number,
                                                   outcome=status, finished_at=finished,
                                                   error_type=WORKER_LOST, error=reason)
        if changed:  # its waiting children follow in this transaction (workflows.py)
            workflows.resolve([row.pk], using)
    if not changed:
        return False
    logger.warning("reconciler: job %s %s (row said %s, attempt %d); row settled %s",
                   row.pk, reason, row.status, number, status)
    base = {"job_id": row.pk, "queue": row.queue, "callable_path": row.callable_path}
    # no signal for an expiry (the worker sends none either)
    if status == JobStatus.SUCCEEDED:
        signals.send(signals.job_succeeded, attempt=number, worker_id=f.settled.holder
                     if f.settled else "", result=None, duration=None, **base)
    elif status == JobStatus.DEAD:
        signals.send(signals.job_dead, attempt=number, worker_id="", error=reason,
                     error_type=WORKER_LOST, **base)
    elif status == JobStatus.CANCELLED:
        signals.send(signals.job_cancelled, running=True, **base)
    return True
