"""Operator controls of whole queues: pause, resume, purge.

* ``pause_queue(queue)``: workers claim nothing from it; ``schedule()`` still accepts jobs
  and due times are kept (what became due meanwhile runs after ``resume_queue``, late).
  Jobs already running finish. Returns whether the state changed.
* ``resume_queue(queue)``: claims again at once (the engine wakes the sleeping workers).
* ``paused_queues()``: the paused ones among the known queues.
* ``purge_queue(queue)``: removes every job waiting in Redis (pending: due or not; not the
  running ones) in bounded batches (``Engine.purge_pending``) and marks their rows
  ``cancelled`` with ``last_error`` "purged from queue <queue>"; returns how many.

A queue is known when ``DELAYQ["QUEUES"]`` or ``DELAYQ["QUEUE_OPTIONS"]`` names it; any
other name is an ``InvalidJob`` naming it (a typo must not pause nothing).
"""

from __future__ import annotations

import logging

from django.db import router
from django.utils import timezone

from django_delayq import signals
from django_delayq.core.conf import Settings, get_settings
from django_delayq.core.connection import get_engine
from django_delayq.exceptions import InvalidJob
from django_delayq.models import LIVE_STATUSES, Job, JobStatus

logger = logging.getLogger(__name__)

PURGE_BATCH = 200  # jobs removed per Redis call (Engine.purge_pending's bound)
PURGED = "purged from queue %s"


def known_queues(s: Settings | None = None) -> tuple[str, ...]:
    s = get_settings() if s is None else s
    return tuple(dict.fromkeys([*s.queues, *s.queue_options]))


def _known(queue: str) -> str:
    known = known_queues()
    if queue not in known:
        raise InvalidJob("unknown queue %r; the queues are %r (DELAYQ['QUEUES'] and "
                         "DELAYQ['QUEUE_OPTIONS'])" % (queue, list(known)))
    return queue


def pause_queue(queue: str) -> bool:
    """Stop claiming from ``queue``; True when it was not paused before."""
    changed = get_engine().pause(_known(queue))
    logger.info("queue %r paused%s", queue, "" if changed else " (already)")
    return changed


def resume_queue(queue: str) -> bool:
    """Claim from ``queue`` again; True when it was paused."""
    changed = get_engine().resume(_known(queue))
    logger.info("queue %r resumed%s", queue, "" if changed else " (was not paused)")
    return changed


def paused_queues() -> list[str]:
    """The paused queues among the known ones, in settings order."""
    return list(get_engine().paused(list(known_queues())))


def purge_queue(queue: str) -> int:
    """Remove the queue's waiting jobs from Redis; their rows become ``cancelled``.

    Loops over bounded batches until none is left; jobs scheduled meanwhile may be purged
    too. Running jobs are not touched (cancel them one by one)."""
    engine = get_engine()
    _known(queue)
    total = 0
    while ids := engine.purge_pending(queue, limit=PURGE_BATCH):
        total += len(ids)
        _cancel_rows(queue, ids)
    logger.warning("queue %r purged: %d waiting job(s) removed", queue, total)
    return total


def _cancel_rows(queue: str, ids: list[str]) -> None:
    """The purged jobs' live rows -> cancelled (a row already final stays as it is; a
    ``running`` one too: its job was waiting in Redis, its lease given up or lost)."""
    now = timezone.now()
    using = router.db_for_write(Job)
    rows = Job.objects.using(using).filter(pk__in=ids, status__in=LIVE_STATUSES)
    found = list(rows.values_list("id", "callable_path"))
    rows.update(status=JobStatus.CANCELLED, last_error=PURGED % queue, finished_at=now,
                updated_at=now)
    for job_id, path in found:
        signals.send(signals.job_cancelled, job_id=job_id, queue=queue, callable_path=path,
                     running=False)
