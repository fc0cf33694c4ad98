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
  did, its death mid-pass would strand rows); they do not double jobs because the
  re-enqueue script skips ids another one re-enqueued lately (``reconciled``:
  ``core/reconcile.py``), deciding and writing at once.

While a cluster node is down its data sets' epochs cannot be read: they are left out of
the check (``unreadable``) and judged when the node answers again.

A sharded queue's shards are full queues in slots of their own, often on different
nodes of a cluster, and one node can lose its data alone: every shard carries its own
epoch (``engine.data_sets``), and a loss of any one is a loss of the queue: its loss
pass walks the queue's rows (the reconciler asks every shard where a job is) and skips
the grace only for rows homed in a lost shard (``took``); the healthy shards' acks
still succeed, so their rows keep the second look. A shard
other than the first one is not judged on its first look: a shard that never received
a job has no epoch and holds nothing, as one lost while nobody watched would, and a
pass without grace over the whole queue could re-run jobs acked moments ago in the
other shards. The first shard answers for a Redis that lost everything.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.utils import timezone

from django_delayq.engine.shard_health import ERRORS

if TYPE_CHECKING:
    from django_delayq.engine import Engine

logger = logging.getLogger(__name__)

# Epoch kinds (the value's last field): who created it, and what it means.
LOST, KEPT, ENQUEUED = "L", "K", "e"


def epoch_kind(value: str | None) -> str:
    """``L``, ``K`` or ``e`` (see the module docstring); "" for an older value."""
    parts = (value or "").split(":")
    return parts[-1] if len(parts) >= 2 else ""


class Epochs:
    """The epochs of ``queues`` as last seen by one reconciler."""

    def __init__(self, engine: Engine, queues: tuple[str, ...]) -> None:
        self.engine, self.queues = engine, queues
        self.known: dict[str, str] = {}
        self.lost_at: dict[str, datetime] = {}  # queue -> when its last loss was recorded
        # queue -> the data sets its last loss took (None: all of them)
        self.lost_sets: dict[str, set[str] | None] = {}
        self.unreadable: set[str] = set()  # data sets whose epoch the last check missed
        # the last check's read of every epoch failed (a node down or stalled), whatever
        # the reads one by one found after it: an outage, if a short one
        self.faltered = False
        # queues whose data this reconciler saw go (a known epoch vanished), not a first
        # look at a Redis that never held them: deliveries may have been lost with it
        self.witnessed: set[str] = set()

    def check(self, create: bool = True) -> dict[str, datetime]:
        """Queues whose data Redis lost since the last look (see the module docstring),
        each with when the loss was recorded, on this host's clock.

        Each data set of a queue (a sharded queue's shards) has its own epoch; the loss
        of one is the queue's (the earliest, when several). A shard other than the
        first one is new on its first look whatever it holds: no pass (the first shard
        answers for a Redis that lost everything while nobody watched).

        ``create=False`` (a dry run) writes nothing: a missing epoch stays missing."""
        looks = [(queue, name) for queue in self.queues
                 for name in self.engine.data_sets(queue)]
        lost: dict[str, datetime] = {}
        took: dict[str, set[str] | None] = {}
        for (queue, name), found in zip(looks, self._read([n for _, n in looks])):
            if name in self.unreadable:
                continue  # judged when its node answers again
            known = self.known.get(name)
            value, loss = self._look_at(queue, name, known, found, create)
            if loss and (known is not None or name == queue):
                at = self._dated(value) or timezone.now()  # stamped ahead: seen now
                lost[queue] = min(at, lost.get(queue, at))
                where = queue if name == queue else "%s (shard %s)" % (queue, name)
                if known is None:  # first look: a new Redis, or one lost while nobody watched
                    took[queue] = None  # nothing anywhere: every data set
                    logger.info("reconciler: queue %r has no epoch key and no data in Redis; "
                                "full pass without grace", where)
                else:  # its data sets taken, unless a first look took them all
                    if (sets := took.setdefault(queue, set())) is not None:
                        sets.add(name)
                        self.witnessed.add(queue)
                    logger.warning("reconciler: queue %r lost its Redis data (epoch key gone); "
                                   "re-enqueueing its live rows without grace", where)
            if value is not None:
                self.known[name] = value
        self.lost_sets.update(took)
        self.lost_at.update(lost)
        return lost

    def _read(self, names: list[str]) -> list[str | None]:
        """The epochs of ``names`` in one round trip; when it fails (a cluster node
        down), one by one: the names whose node does not answer are in ``unreadable``
        (their value here is None). Raises when none can be read (Redis is down)."""
        # a data set its engine still sets aside (ShardHealth) is judged once it is used
        # again: its loss pass would find none of its rows (their look-ups skip it)
        self.unreadable = {n for n in names if self.engine.health.down(n)}
        self.faltered = False
        try:
            return list(self.engine.epochs(names))
        except ERRORS as exc:
            failure: BaseException = exc
            self.faltered = True
        found: list[str | None] = []
        for name in names:
            try:
                found += self.engine.health.run(name, lambda: self.engine.epochs([name]))  # noqa: B023
            except ERRORS:
                found.append(None)
                self.unreadable.add(name)
        if len(self.unreadable) == len(names):
            raise failure
        return found

    def assume_lost(self, queue: str) -> None:
        """Treat every data set of ``queue`` as lost (``delayq_reconcile --assume-lost``)."""
        self.lost_sets[queue] = None
        self.lost_at[queue] = timezone.now()

    def began(self) -> dict[str, datetime]:
        """When the data each queue holds now began (its known epoch's creation, this
        host's clock), for the queues whose epoch says it began empty (not ``K``): a
        missing row created and due before it was lost with earlier data, or never sent.
        A queue whose epoch is stamped ahead of the clock now is left out: that clock was
        set back since (a Redis clock stepped back; in the test helpers, a ``now=`` or a
        ``freeze_time`` later than the call's), so when its data began is unknown, and
        "now" would take every row written before for one lost with earlier data (charged
        an attempt it never had). Dated with one ``TIME`` call per queue; nothing else is
        read."""
        dated = {q: self._dated(value) for q in self.queues
                 if (value := self.known.get(q)) is not None and epoch_kind(value) != KEPT}
        return {q: at for q, at in dated.items() if at is not None}

    def took(self, queue: str, job_id: str) -> bool:
        """Whether the last loss of ``queue`` took the data set ``job_id`` is homed in: a
        loss of one shard is no reason to skip the grace for the other shards' rows
        (their jobs may have been acked there, their audit flush on its way)."""
        sets = self.lost_sets.get(queue)
        return sets is None or self.engine.home_of(queue, job_id) in sets

    def _look_at(self, queue: str, name: str, known: str | None, value: str | None,
                 create: bool) -> tuple[str | None, bool]:
        """(the epoch to remember, whether the data set ``name`` of ``queue`` lost its
        data). On a first look, "holds data" is the whole queue's: a first shard that
        never received a job while the others hold some is no loss."""
        if value is not None:
            # a first look at a kept epoch, or unchanged: no loss; replaced: the old data is
            # gone (unless the new one is of kind K)
            return value, known not in (None, value) and epoch_kind(value) != KEPT
        held = (self.engine.set_holds_data(name) if known is not None
                else self.engine.holds_data(queue))
        # a new epoch whose kind says whether the data set held any data; ``SET NX``: when
        # another process created one first, that one
        value = "%d:%s:%s" % (self.engine.time_ms(), uuid.uuid4().hex[:16], KEPT if held else LOST)
        if create:
            value = self.engine.create_epoch(name, value)
        kind = epoch_kind(value)
        if kind == KEPT:
            log = logger.info if known is None else logger.warning
            log("reconciler: queue %r had no epoch key but holds data in Redis (evicted or "
                "deleted by hand?); not a data loss, no pass without grace", name)
        # a first look: a loss only when the queue held nothing; else unless it held data
        return value if create else None, kind == LOST if known is None else kind != KEPT

    def _dated(self, value: str | None) -> datetime | None:
        """When the epoch ``value`` was created, on this host's clock; None when it is
        stamped ahead of the engine's clock now (set back since: no date to give)."""
        now, created = timezone.now(), (value or "").split(":")[0]
        if not created.isdigit():
            return now
        age_ms = self.engine.time_ms() - int(created)
        return now - timedelta(milliseconds=age_ms) if age_ms >= 0 else None
