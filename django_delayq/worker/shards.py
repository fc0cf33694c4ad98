"""Settling a sharded queue shard by shard: a node that is down holds back only the
outcomes of its own shard.

The settling thread backs off per queue (``queue_backoff.py``). A sharded queue spans
several nodes, so the unit that fails together is the shard: ``ShardSettler.send``
settles each shard's outcomes with calls of their own; the outcomes of a shard whose
node fails (or that ``ShardHealth`` sets aside) are kept for a later round, still held
(their leases extended like a running job's), while the other shards' are settled and
recorded now. Only when every shard of the queue fails is the error raised, and the
queue backs off as a whole, as a plain queue does.

``ShardBackoff`` makes the settling thread wait for the set-aside shard's delay rather
than retry its outcomes every millisecond.
"""

from __future__ import annotations

from collections.abc import Callable

from django_delayq.engine import Engine
from django_delayq.engine.shard_health import ERRORS
from django_delayq.worker.queue_backoff import QueueBackoff
from django_delayq.worker.runner import Outcome
from django_delayq.worker.settle import Sent, Settler


class ShardSettler(Settler):
    """``Settler`` whose ``send`` goes shard by shard for sharded queues. ``keep``: hands
    outcomes not settled back to the ledger (``Ledger.keep_unsettled``)."""

    keep: Callable[[list[Outcome]], None] = staticmethod(lambda outcomes: None)  # type: ignore[assignment]

    def send(self, outcomes: list[Outcome]) -> Sent:
        by_queue: dict[str, list[Outcome]] = {}
        for o in outcomes:
            by_queue.setdefault(o.job.queue, []).append(o)
        sent: Sent = []
        for queue, items in by_queue.items():
            names = self.engine.data_sets(queue)
            sent += (super().send(items) if len(names) == 1
                     else self._send_shards(queue, names, items))
        return sent

    def _send_shards(self, queue: str, names: list[str], items: list[Outcome]) -> Sent:
        parts: dict[str, list[Outcome]] = {}
        for o in items:
            parts.setdefault(self.engine.home_of(queue, o.job.id), []).append(o)
        sent: Sent = []
        kept: list[Outcome] = []
        errors: list[BaseException] = []
        for part in parts.values():
            try:
                sent += super().send(part)
            except ERRORS as exc:
                kept += part
                errors.append(exc)
        if kept and not sent and all(self.engine.health.down(n) for n in names):
            raise errors[0]  # every shard fails: the queue backs off as a whole
        if kept:
            self.keep(kept)
        return sent


class ShardBackoff(QueueBackoff):
    """The settling thread's per-queue backoff; a sharded queue whose outcomes wait for
    a set-aside shard is retried when the first such shard may be tried again."""

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.engine = engine

    def remaining_ms(self, queue: str) -> float:
        own = super().remaining_ms(queue)
        health = self.engine.health
        waits = [health.remaining_ms(name) for name in self.engine.data_sets(queue)
                 if health.down(name)]
        return max(own, min(waits)) if waits else own
