"""Did Redis lose a queue's data? The epoch key tells a data loss from a new Redis.

Every queue carries an epoch key ``{prefix:queue}:epoch`` in its own hash slot, so it
disappears together with the queue's data (FLUSHALL, a restart without persistence, a
failover to an empty replica). Its value is ``<created ms>:<token>:<kind>``.

Whoever first writes a queue's jobs creates it: ``enqueue.lua`` sets it (``SET NX``,
kind ``e``) whenever it runs. So a web process that schedules jobs into a brand-new
Redis before the first worker of a deploy starts has created the epoch, and that worker
sees an epoch on its first look: no loss, nothing re-enqueued out of turn. "No epoch"
means no job has been written into this Redis since it was last empty of this queue.

A reconciler that finds no epoch creates it (``SET NX``) after reading whether the queue
holds any data at all (pending, in flight, dead, attempts, envelopes, ``reconciled``):

* none: a Redis that never held this queue, or one that lost it; kind ``L``. Either way
  no job of the queue was ever acked *in this Redis*, so a live row whose job is absent
  cannot be "acked here, audit flush on its way": the loss pass is safe.
* some: only the epoch key went away (evicted, deleted by hand, or written by a version
  whose enqueue does not create it); kind ``K``: not a loss, no pass. Re-enqueueing
  without grace here would re-run jobs acked moments ago whose flush has not landed.

``tick()`` reads the epochs every ``EPOCH_CHECK_SECONDS``:

* epoch present on the first look: remembered, no pass (a restart of every worker, a
  new deploy);
* no epoch on the first look: a pass only when the queue holds nothing (kind ``L``,
  created by this reconciler or, moments ago, by another one);
* the remembered epoch vanished or changed: a loss, unless the new one is of kind ``K``.
  Every reconciler that notices runs the pass (if only the one that re-created the key
  did, its death mid-pass would strand rows); they do not double jobs because each
  skips ids another one re-enqueued (``reconciled``: ``core/reconcile.py``).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from django.utils import timezone

from django_delayq.engine import Engine

logger = logging.getLogger(__name__)

# Epoch kinds (the value's last field): who created it, and what it means.
LOST, KEPT, ENQUEUED = "L", "K", "e"


def epoch_kind(value: str | None) -> str:
    """``L``, ``K`` or ``e`` (see the module docstring); "" for an older value."""
    parts = (value or "").split(":")
    return parts[-1] if len(parts) >= 2 else ""


def epoch_created_ms(value: str | None) -> int | None:
    head = (value or "").split(":")[0]
    return int(head) if head.isdigit() else None


class Epochs:
    """The epochs of ``queues`` as last seen by one reconciler."""

    def __init__(self, engine: Engine, queues: tuple[str, ...]) -> None:
        self.engine = engine
        self.queues = queues
        self.known: dict[str, str] = {}

    def check(self, create: bool = True) -> dict[str, datetime]:
        """Queues whose data Redis lost since the last look (see the module docstring),
        each with when the loss was recorded, on this host's clock.

        ``create=False`` (a dry run) writes nothing: a missing epoch stays missing."""
        lost = {}
        for queue, found in zip(self.queues, self.engine.epochs(self.queues)):
            known = self.known.get(queue)
            value, loss = self._look_at(queue, known, found, create)
            if loss:
                lost[queue] = self._dated(value)
                self._log_loss(queue, known)
            if value is not None:
                self.known[queue] = value
        return lost

    def _look_at(self, queue: str, known: str | None, value: str | None,
                 create: bool) -> tuple[str | None, bool]:
        """(the epoch to remember, whether the queue's data was lost)."""
        if value is not None:
            if known is None or value == known:
                return value, False  # first look at a kept epoch, or unchanged
            return value, epoch_kind(value) != KEPT  # replaced: the old data is gone
        value = self._create_epoch(queue, write=create)
        kind = epoch_kind(value)
        if kind == KEPT:
            log = logger.info if known is None else logger.warning
            log("reconciler: queue %r had no epoch key but holds data in Redis (evicted or "
                "deleted by hand?); not a data loss, no pass without grace", queue)
        if known is None:
            return value if create else None, kind == LOST
        return value if create else None, kind != KEPT

    def _create_epoch(self, queue: str, write: bool = True) -> str:
        """``SET NX`` a new epoch whose kind says whether the queue held any data; when
        another process created one first, that one."""
        held = self.engine.holds_data(queue)
        value = "%d:%s:%s" % (self.engine.time_ms(), uuid.uuid4().hex[:16],
                              KEPT if held else LOST)
        return self.engine.create_epoch(queue, value) if write else value

    def _dated(self, value: str | None) -> datetime:
        """When the loss was recorded (the new epoch's creation), on this host's clock."""
        now = timezone.now()
        created = epoch_created_ms(value)
        if created is None:
            return now
        age_ms = self.engine.time_ms() - created
        return now - timedelta(milliseconds=age_ms) if age_ms >= 0 else now

    def _log_loss(self, queue: str, known: str | None) -> None:
        if known is None:  # first look: a new Redis, or one lost while nobody watched
            logger.info("reconciler: queue %r has no epoch key and no data in Redis; "
                        "full pass without grace", queue)
        else:
            logger.warning("reconciler: queue %r lost its Redis data (epoch key gone); "
                           "re-enqueueing its live rows without grace", queue)
