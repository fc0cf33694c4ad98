"""Durable pauses: a queue's, or one group's, kept in the database as well as in Redis
(docs/guarantees.md, "Pause").

* **The row, then Redis.** ``pause(queue, group)`` writes a ``QueuePause`` row (committed
  at once in autocommit, else with the caller's transaction), then the pause in Redis
  (what claim.lua enforces: one flag per shard); ``resume`` deletes the row, then
  resumes in Redis. A Redis write that fails leaves the row saying what the operator
  asked: a pause that reached some shards only raises ``PartialControl`` naming them,
  and running it again, or the reconciler's next pass, completes it.
* **Written back after a loss.** ``restore(engine, queues)`` pauses in Redis again
  every queue and group the rows hold paused (``SET NX``: a no-op where Redis holds it).
  The reconciler runs it at each interval, and for a queue whose data Redis lost
  (its epoch gone) before that queue's loss pass re-enqueues any job: no job of a
  paused queue runs after the loss because the loss took its pause with it.
* ``kept(queues)``: the queues the rows hold paused (the operator's intent, shown next
  to what Redis says where they differ).

Only pauses: a queue or group paused in Redis with no row (a purge at work, a pause
made before these rows existed) is not resumed here, but for a pause ``restore`` wrote
itself after a ``resume`` deleted its row (read before, written after): undone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import router, transaction

from django_delayq.core.connection import get_engine
from django_delayq.engine.shard_health import ERRORS
from django_delayq.models import QueuePause

if TYPE_CHECKING:
    from django_delayq.engine import Engine

logger = logging.getLogger(__name__)


def pause(queue: str, group: str = "") -> bool:
    """Pause ``queue`` (or its ``group``): the row, then Redis. True when either was not
    paused before."""
    using = router.db_for_write(QueuePause)
    with transaction.atomic(using=using):
        _, created = QueuePause.objects.using(using).get_or_create(queue=queue, group=group)
    engine = get_engine()
    changed = engine.pause_group(queue, group) if group else engine.pause(queue)
    return bool(changed or created)


def resume(queue: str, group: str = "") -> bool:
    """Resume ``queue`` (or its ``group``): the row deleted, then Redis. True when either
    held it paused."""
    using = router.db_for_write(QueuePause)
    with transaction.atomic(using=using):
        deleted, _ = QueuePause.objects.using(using).filter(queue=queue, group=group).delete()
    engine = get_engine()
    changed = engine.resume_group(queue, group) if group else engine.resume(queue)
    return bool(changed or deleted)


def kept(queues: Iterable[str]) -> set[str]:
    """The queues of ``queues`` the rows hold paused (whole queues, not groups)."""
    return set(QueuePause.objects.filter(queue__in=list(queues), group="")
               .values_list("queue", flat=True))


def kept_group(queue: str, group: str) -> bool:
    """Whether the rows hold ``group`` of ``queue`` paused."""
    return QueuePause.objects.filter(queue=queue, group=group).exists()


def restore(engine: Engine, queues: Iterable[str]) -> set[str]:
    """Redis paused again as the rows say, for ``queues``; returns the queues whose pause
    could not be written on every shard now (their node fails: tried at the next call)."""
    failed: set[str] = set()
    written = 0
    for row in QueuePause.objects.filter(queue__in=list(queues)).order_by("queue", "group"):
        try:
            wrote = engine.pause_group(row.queue, row.group) if row.group else \
                engine.pause(row.queue)
            if wrote and not QueuePause.objects.filter(pk=row.pk).exists():
                # resumed since the read (its row deleted, then Redis resumed): undone
                _ = engine.resume_group(row.queue, row.group) if row.group else \
                    engine.resume(row.queue)
                continue
            written += wrote
        except ERRORS as exc:
            failed.add(row.queue)
            logger.debug("queue %r: its pause not written back yet: %s", row.queue, exc)
    if written:
        logger.warning("%d pause(s) written to Redis again from the rows (Redis had lost "
                       "them, or a pause failed part-way)", written)
    return failed
