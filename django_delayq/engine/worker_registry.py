"""The workers registry: who is alive, and what each worker says about itself.

``{prefix}:workers`` (ZSET worker id -> last heartbeat, Redis ms) and
``{prefix}:workers:info`` (HASH worker id -> JSON: host, pid, queues, ...), one slot
(hash tag ``{prefix}``). A worker writes both at every heartbeat and removes its entries
when it stops; the reconciler reads the beats to tell a live worker (its audit flush is
on its way) from a dead one; ``delayq_status`` and the metrics read them for display.
A worker that died without removing itself is forgotten by the live workers once its
last beat is older than they say (``forget_silent_workers``, called from their keeper
threads), so the registry does not list it forever.
Every call is one or two O(log n) commands, or a read of the registry (as many entries
as workers, or as silent ones).

Whoever can write to Redis can write anything there, so the read of the registry is
capped (``workers``): the ``MAX_WORKERS_READ`` most recent heartbeats; an id over
``MAX_WORKER_ID_BYTES`` is skipped (no worker has one); an info entry is read only when
it is at most ``MAX_INFO_BYTES`` and the infos read so far leave room for it under
``MAX_INFO_TOTAL_BYTES`` (their sizes are asked first, ``HSTRLEN``), else the entry says
how large it was; and entries of the info hash without a heartbeat are never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django_delayq.engine.base import RedisOwner
from django_delayq.engine.replies import envelope_text

MAX_WORKERS_READ = 1000  # the most recent heartbeats read by ``workers``
MAX_WORKER_ID_BYTES = 512  # a longer id is skipped (ids are host:pid:token, a --worker-id)
MAX_INFO_BYTES = 64 * 1024  # one info entry (a worker's: under 40 KiB with 50 jobs shown)
MAX_INFO_TOTAL_BYTES = 4 * 1024 * 1024  # all info entries of one read


def _size(value: bytes | str) -> int:
    return len(value) if isinstance(value, bytes) else len(value.encode(errors="replace"))


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    """One registered worker: id, last heartbeat (Redis ms) and its info as written
    (None when absent; any text: a worker's, or whatever else wrote it)."""

    id: str
    beat_ms: float
    info: str | None
    info_bytes_unread: int = 0  # an info entry over the read limits: its size, not read


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
        ids = [envelope_text(raw)
               for raw in self.client.zrangebyscore(keys.workers, "-inf", bound)]
        if ids:
            pipe = self.client.pipeline(transaction=False)
            pipe.zremrangebyscore(keys.workers, "-inf", bound)
            pipe.hdel(keys.workers_info, *ids)
            pipe.execute()
        return ids

    def workers(self, limit: int = MAX_WORKERS_READ) -> list[WorkerEntry]:
        """The registered workers with the ``limit`` most recent heartbeats, oldest
        heartbeat first (ids and info decoded, bytes that are not UTF-8 replaced), within
        the read limits of the module docstring."""
        keys = self.global_keys
        beats = self.client.zrevrange(keys.workers, 0, max(0, limit) - 1, withscores=True)
        listed = [(raw, float(beat)) for raw, beat in beats
                  if _size(raw) <= MAX_WORKER_ID_BYTES]
        if not listed:
            return []
        pipe = self.client.pipeline(transaction=False)
        for raw, _beat in listed:
            pipe.hstrlen(keys.workers_info, raw)
        sizes = [int(n) for n in pipe.execute()]
        wanted, budget = [], MAX_INFO_TOTAL_BYTES
        for (raw, _beat), size in zip(listed, sizes):  # the most recent first
            if 0 < size <= min(MAX_INFO_BYTES, budget):
                wanted.append(raw)
                budget -= size
        infos = dict(zip(wanted, self.client.hmget(keys.workers_info, wanted))) if wanted else {}
        return [WorkerEntry(id=envelope_text(raw), beat_ms=beat,
                            info=None if infos.get(raw) is None else envelope_text(infos[raw]),
                            info_bytes_unread=0 if raw in infos else size)
                for (raw, beat), size in reversed(list(zip(listed, sizes)))]

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
