"""The workers registry: who is alive, and what each worker says about itself.

``{prefix}:workers`` (ZSET worker id -> last heartbeat, Redis ms) and
``{prefix}:workers:info`` (HASH worker id -> JSON: host, pid, queues, ...), one slot
(hash tag ``{prefix}``). A worker writes both at every heartbeat and removes its entries
when it stops; the reconciler reads the beats to tell a live worker (its audit flush is
on its way) from a dead one; ``delayq_status`` and the metrics read them for display.
A worker that died without removing itself is forgotten by the live workers once its
last beat is older than they say (``forget_silent_workers``, called from their keeper
threads), so the registry does not list it forever.
Every call is one or two O(log n) commands, or a read of the whole registry (as many
entries as workers, or as silent ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django_delayq.engine.base import RedisOwner


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    """One registered worker: id, last heartbeat (Redis ms) and its info as written
    (None when absent; any text: a worker's, or whatever else wrote it)."""

    id: str
    beat_ms: float
    info: str | None


class WorkerRegistry(RedisOwner):
    def register_worker(self, worker_id: str, info: str) -> None:
        """Record a heartbeat of ``worker_id`` (now, Redis clock) with its ``info`` (JSON)."""
        keys = self.global_keys
        now_ms = self.time_ms()
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(keys.workers, {worker_id: now_ms})
        pipe.hset(keys.workers_info, worker_id, info)
        pipe.execute()

    def unregister_worker(self, worker_id: str) -> None:
        """Remove ``worker_id`` from the registry (it stopped)."""
        keys = self.global_keys
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(keys.workers, worker_id)
        pipe.hdel(keys.workers_info, worker_id)
        pipe.execute()

    def forget_silent_workers(self, silent_before_ms: float) -> list[str]:
        """Remove the workers whose last heartbeat is older than ``silent_before_ms``
        (Redis ms), with their info; returns their ids. The beats go by score range, so a
        worker that beat again in the meantime keeps its entry (its info is written again
        at its next beat)."""
        keys = self.global_keys
        bound = "(%r" % float(silent_before_ms)
        ids = [_text(raw) for raw in self.client.zrangebyscore(keys.workers, "-inf", bound)]
        if ids:
            pipe = self.client.pipeline(transaction=False)
            pipe.zremrangebyscore(keys.workers, "-inf", bound)
            pipe.hdel(keys.workers_info, *ids)
            pipe.execute()
        return ids

    def workers(self) -> list[WorkerEntry]:
        """Every registered worker, oldest heartbeat first (ids and info decoded, bytes
        that are not UTF-8 replaced)."""
        keys = self.global_keys
        beats = self.client.zrange(keys.workers, 0, -1, withscores=True)
        infos = self.client.hgetall(keys.workers_info) if beats else {}
        info_by_id = {_text(k): _text(v) for k, v in infos.items()}
        return [WorkerEntry(id=_text(raw), beat_ms=float(beat),
                            info=info_by_id.get(_text(raw))) for raw, beat in beats]

    def worker_beats(self, worker_ids: Sequence[str]) -> list[float | None]:
        """The last heartbeat (Redis ms) of each of ``worker_ids``; None if unregistered."""
        if not worker_ids:
            return []
        scores = self.client.zmscore(self.global_keys.workers, list(worker_ids))
        return [None if s is None else float(s) for s in scores]

    def beats_since(self, since_ms: float) -> list[float]:
        """The heartbeats (Redis ms) of every worker heard from at or after ``since_ms``."""
        found = self.client.zrangebyscore(self.global_keys.workers, since_ms, "+inf",
                                          withscores=True)
        return [float(score) for _, score in found]

    def count_workers(self, since_ms: float) -> int:
        """How many workers were heard from at or after ``since_ms`` (Redis ms)."""
        return int(self.client.zcount(self.global_keys.workers, since_ms, "+inf"))
