"""Per-queue back-off: one unreachable queue must not stop a worker's other queues.

On a Redis Cluster each queue lives on one node (one hash slot). When a node is down,
every command on its queues fails while the queues on the other nodes work. The worker
runs each per-queue step (claim, settle, recover) through ``QueueBackoff.each``: a
queue whose step failed is skipped for a growing delay (0.1 s doubling to 5 s), the
others go on. When every queue tried failed (a single Redis is down), the error is
raised as before and the worker loop backs off as a whole.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from redis.exceptions import RedisError, SlotNotCoveredError

logger = logging.getLogger(__name__)

ERRORS = (RedisError, SlotNotCoveredError, OSError)
FIRST_DELAY_SECONDS = 0.1
MAX_DELAY_SECONDS = 5.0


class QueueBackoff:
    """Which queues are backing off after a Redis error, and until when (main thread)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._until: dict[str, float] = {}
        self._delay: dict[str, float] = {}

    def waiting(self, queue: str) -> bool:
        return self.clock() < self._until.get(queue, 0.0)

    def each(self, queues: Iterable[str], step: Callable[[str], object]) -> list[str]:
        """Run ``step(queue)`` for every queue not backing off; return the queues not done
        (backing off, or failed now). If several queues were tried and every one failed,
        raise the error instead (the caller backs off as a whole: a single Redis is down).
        One queue failing alone backs off alone, even when it was the only one tried: on
        a cluster with one node down, the loop must not slow down for the other queues."""
        left: list[str] = []
        failed: list[tuple[str, BaseException]] = []
        worked = False
        for queue in queues:
            if self.waiting(queue):
                left.append(queue)
                continue
            try:
                step(queue)
            except ERRORS as exc:
                left.append(queue)
                failed.append((queue, exc))
            else:
                worked = True
                self._until.pop(queue, None)
                self._delay.pop(queue, None)
        if len(failed) > 1 and not worked:
            raise failed[-1][1]
        for queue, error in failed:
            self._back_off(queue, error)
        return left

    def _back_off(self, queue: str, exc: BaseException) -> None:
        delay = min(max(2 * self._delay.get(queue, 0.0), FIRST_DELAY_SECONDS),
                    MAX_DELAY_SECONDS)
        self._delay[queue] = delay
        self._until[queue] = self.clock() + delay
        logger.warning("queue %r: Redis unavailable (%s); the other queues go on, this one "
                       "is retried in %.1fs", queue, exc, delay)
