"""Per-queue back-off: one unreachable queue must not stop a worker's other queues.

On a Redis Cluster each queue lives on one node (one hash slot). When a node is down,
every command on its queues fails while the queues on the other nodes work. The worker
runs each per-queue step (claim, settle, recover) through ``QueueBackoff.each``: a
queue whose step failed is skipped for a growing delay (0.1 s doubling to 5 s, the
delays of a shard set aside: engine/shard_health.py), the others go on, and the loop
sleeps no shorter than that delay for a queue that is due (``remaining_ms``): a queue
backing off never makes it spin.

Only when nothing works (every queue this worker has tried is failing: a single Redis
is down, or every node) is the error raised as before, and the worker loop backs off
as a whole with one rate-limited log. Which queues failed together does not decide it:
several queues may live on the node that is down, and a round that tries only those
must not pause the loop for the queues of the other nodes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from django_delayq.engine.logtext import shown
from django_delayq.engine.shard_health import (
    FIRST_DELAY_SECONDS,
    MAX_DELAY_SECONDS,
    OUTAGES,
    UNREACHABLE,
)

logger = logging.getLogger(__name__)


class QueueBackoff:
    """Which queues are backing off after a Redis error, and until when (main thread)."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._delay: dict[str, float] = {}  # the queues whose last try failed
        self._tried: set[str] = set()
        self.failures = 0  # steps that found a node unreachable (a sign of an outage)

    def waiting(self, queue: str) -> bool:
        return time.monotonic() < self._until.get(queue, 0.0)

    def remaining_ms(self, queue: str) -> float:
        """How long ``queue`` is still skipped, in ms (0 when it may be tried)."""
        return max(0.0, self._until.get(queue, 0.0) - time.monotonic()) * 1000

    def each(self, queues: Iterable[str], step: Callable[[str], object]) -> list[str]:
        """Run ``step(queue)`` for every queue not backing off; return the queues not done
        (backing off, or failed now). A queue that fails backs off alone, even when it was
        the only one tried, unless nothing works: when every queue ever tried is failing,
        the error is raised instead (the caller backs off as a whole)."""
        left: list[str] = []
        failed: list[tuple[str, BaseException]] = []
        for queue in queues:
            if self.waiting(queue):
                left.append(queue)
                continue
            self._tried.add(queue)
            try:
                step(queue)
            except OUTAGES as exc:
                left.append(queue)
                failed.append((queue, exc))
                self.failures += isinstance(exc, UNREACHABLE)
            else:
                self._until.pop(queue, None)
                self._delay.pop(queue, None)
        if failed and self._nothing_works([queue for queue, _ in failed]):
            for queue, _ in failed:  # failing, and tried again at the loop's own pace,
                self._delay.setdefault(queue, 0.0)  # as every queue is from now on
            self._until.clear()
            raise failed[-1][1]
        for queue, error in failed:
            self._back_off(queue, error)
        return left

    def _nothing_works(self, failed: list[str]) -> bool:
        """Whether every queue ever tried is failing: the ones that failed now and the
        ones whose last try failed. A queue that worked last time (on another node)
        means one node is down, not Redis."""
        return all(queue in self._delay or queue in failed for queue in self._tried)

    def _back_off(self, queue: str, exc: BaseException) -> None:
        delay = min(max(2 * self._delay.get(queue, 0.0), FIRST_DELAY_SECONDS), MAX_DELAY_SECONDS)
        self._delay[queue] = delay
        self._until[queue] = time.monotonic() + delay
        logger.warning("queue %r: Redis unavailable (%s); the other queues go on, this one "
                       "is retried in %.1fs", queue, shown(exc), delay)
