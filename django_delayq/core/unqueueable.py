"""Rows whose job can never be enqueued: an id the scripts refuse (``engine.bad_id``:
empty, over 256 bytes, control characters, not UTF-8), which only a row written into the
database directly can have (the API makes every id). The reconciler ends such a row
``dead`` before it re-enqueues the others (``end_dead``): re-enqueued, every claim would
set it aside and the next pass put it back, for ever. Its reason is on the row and on a
dead attempt; it sends ``job_dead`` and resolves its waiting children, like any death.
"""

from __future__ import annotations

import logging

from django.db import router, transaction
from django.utils import timezone

from django_delayq import signals
from django_delayq.core import workflows
from django_delayq.engine import bad_id
from django_delayq.engine.logtext import shown
from django_delayq.exceptions import InvalidRow, type_path
from django_delayq.models import Job, JobAttempt, JobStatus

logger = logging.getLogger(__name__)

INVALID_ROW = type_path(InvalidRow)


def why_not(row: Job) -> str | None:
    """Why ``row``'s job can never be enqueued, as its ``last_error``; None if it can."""
    why = bad_id(row.pk)
    return None if why is None else "invalid row: %s: it cannot be enqueued" % why


def end_dead(rows: list[Job]) -> list[Job]:
    """``rows`` less those that can never be enqueued, each ended dead here."""
    keep = []
    for row in rows:
        reason = why_not(row)
        if reason is None:
            keep.append(row)
        else:
            _end(row, reason)
    return keep


def _end(row: Job, reason: str) -> None:
    """Dead with ``reason``, conditional on the row being unchanged since it was read (a
    worker or an operator that changed it meanwhile wins). The attempt is the one a claim
    would have charged: the row's count + 1."""
    now, number, using = timezone.now(), row.attempts + 1, router.db_for_write(Job)
    with transaction.atomic(using=using):
        changed = Job.objects.using(using).filter(
            pk=row.pk, status=row.status, updated_at=row.updated_at).update(
            status=JobStatus.DEAD, attempts=number, finished_at=now, last_error=reason,
            error_type=INVALID_ROW, traceback="", updated_at=now)
        if changed:
            JobAttempt.objects.using(using).create(job_id=row.pk, number=number,
                                                   outcome=JobStatus.DEAD, finished_at=now,
                                                   error_type=INVALID_ROW, error=reason)
            workflows.resolve([row.pk], using)  # its waiting children follow
    if changed:
        logger.warning("reconciler: job %s (queue %s): %s; it ends dead", shown(row.pk),
                       shown(row.queue), reason)
        signals.send(signals.job_dead, job_id=row.pk, queue=row.queue,
                     callable_path=row.callable_path, attempt=number, worker_id="",
                     error=reason, error_type=INVALID_ROW)
