"""Where the jobs of a sharded queue live: shard names, the shard of a job id, and how
many shards a queue's data spans.

A queue configured with N shards keeps N full data sets (every key of ``QueueKeys``),
one per hash tag, so on a Redis Cluster the shards spread over the nodes:

* shard 0 is the queue itself, ``{prefix:queue}`` (an unsharded queue is its shard 0,
  so the jobs of a queue that grows from 1 to N shards stay where they are);
* shard ``i`` >= 1 is the data set of the name ``queue#i``, ``{prefix:queue#i}``.

A job's **home** shard is ``crc32(id) mod N`` (stable across processes and versions):
new jobs go there, and every look-up by id tries it first.

**The span.** ``{prefix:queue}:shards`` (shard 0's slot, and the same value in every
other shard's slot) records the highest shard count the queue's data was ever written
with. Claims, counts and look-ups cover
``max(configured, recorded)`` shards, so a shard count lowered in the settings leaves
no job behind: the retired shards are drained, never written to again. Each process
reads the record at most every ``SPAN_REFRESH_SECONDS`` per queue and raises it when its
own count is higher (no job is enqueued into a shard the record does not cover).
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from django_delayq.engine.replies import integer
from django_delayq.engine.shard_health import ERRORS

if TYPE_CHECKING:
    from django_delayq.engine.client import RedisClient

SHARD_MARK = "#"  # shard i >= 1 of queue q is the data set named q#i
MAX_SHARDS = 64
SPAN_REFRESH_SECONDS = 30.0


def shard_name(queue: str, index: int) -> str:
    """The data set name of shard ``index`` of ``queue`` (shard 0 is ``queue``)."""
    return queue if index == 0 else "%s%s%d" % (queue, SHARD_MARK, index)


def shard_index(job_id: str, count: int) -> int:
    """The home shard of ``job_id`` among ``count`` shards."""
    if count <= 1:
        return 0
    return zlib.crc32(job_id.encode("utf-8", "surrogatepass")) % count


class ShardMap:
    """The configured shard counts (queue -> N) and the recorded spans of one engine.
    ``counts`` None: no queue is sharded and no span is ever read (a bare engine)."""

    def __init__(self, counts: Mapping[str, int] | None) -> None:
        self.counts = None if counts is None else {q: int(n) for q, n in counts.items()}
        self._spans: dict[str, tuple[float, int]] = {}
        self._turns: dict[str, int] = {}
        self._lock = threading.Lock()

    def count(self, queue: str) -> int:
        """How many shards new jobs of ``queue`` are spread over."""
        return 1 if self.counts is None else max(1, self.counts.get(queue, 1))

    def home(self, queue: str, job_id: str) -> str:
        return shard_name(queue, shard_index(job_id, self.count(queue)))

    def span(self, client: RedisClient, queue: str, record_key: Callable[[int], str]) -> int:
        """How many shards hold data of ``queue`` (see the module docstring). The record
        is kept in every shard's slot (``record_key(i)``): shard 0's is read; when it is
        missing (its node lost its data), the others are, in one pipeline, so a count
        lowered while retired shards still hold jobs survives the loss of shard 0. While
        a node is down (a read or write fails), the span last seen is kept and read again
        a second later."""
        if self.counts is None:
            return 1
        now = time.monotonic()
        cached = self._spans.get(queue)
        if cached is not None and now - cached[0] < SPAN_REFRESH_SECONDS:
            return cached[1]
        configured = self.count(queue)
        try:
            span = self._read_span(client, configured, record_key)
        except ERRORS:  # a node down: the span last seen (or configured), read again soon
            span = max(configured, cached[1] if cached is not None else 1)
            self._spans[queue] = (now - SPAN_REFRESH_SECONDS + 1.0, span)
            return span
        self._spans[queue] = (now, span)
        return span

    @staticmethod
    def _read_span(client: RedisClient, configured: int, record_key: Callable[[int], str]) -> int:
        recorded = at_zero = min(max(0, integer(client.get(record_key(0)))), MAX_SHARDS)
        if recorded == 0:  # never recorded, or shard 0's node lost it: ask the others
            pipe = client.pipeline(transaction=False)
            for i in range(1, MAX_SHARDS):
                pipe.get(record_key(i))
            recorded = min(max([0, *(integer(v) for v in pipe.execute())]), MAX_SHARDS)
        span = max(configured, recorded, 1)
        if span > 1 and (at_zero != span or integer(client.get(record_key(span - 1))) != span):
            for i in range(span):  # every shard's slot holds it
                client.set(record_key(i), span)
        return span

    def cached(self, queue: str) -> int | None:
        """The span last read for ``queue`` (None: never read)."""
        found = self._spans.get(queue)
        return None if found is None else found[1]

    def forget(self, queue: str) -> None:
        """Read the record again at the next use (after a purge)."""
        self._spans.pop(queue, None)

    def turn(self, queue: str, span: int) -> int:
        """The shard a claim of ``queue`` starts with: the next one at each call."""
        with self._lock:
            index = self._turns.get(queue, -1) + 1
            self._turns[queue] = index
        return index % span
