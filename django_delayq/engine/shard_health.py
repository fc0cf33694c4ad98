"""Which data sets (shards) of this process's engine are failing, and until when.

On a Redis Cluster each shard of a sharded queue lives on one node. When a node is
down, every command on its shards fails while the other shards work. ``ShardHealth``
remembers a failing shard and keeps it aside for a growing delay (0.1 s doubling to
5 s): calls that span the shards (claim, recover, the lease extends, settling) serve the
healthy ones and skip that one without waiting for its node, and ``schedule()`` into it
fails at once (its rows stay in the outbox) instead of waiting for a connect timeout on
every call. The first call after the delay tries the node again; one that works
forgets the failure.

Shared by every thread of the process (the claim loop, the settling thread, the
heartbeat, the reconciler): one lock, no I/O under it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from redis.exceptions import (
    ClusterDownError,
    RedisClusterException,
    RedisError,
    SlotNotCoveredError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger(__name__)

# What a node that is down (or a slot no node serves) raises: RedisClusterException is not
# a RedisError (SlotNotCoveredError, "no node answers" at start).
ERRORS = (RedisError, RedisClusterException, OSError)
# An outage only, for the callers that log it as one line without a traceback: the
# other RedisClusterExceptions are bugs ("keys must map to the same slot", bad arguments)
OUTAGES = (RedisError, SlotNotCoveredError, OSError)
# A node that does not answer (down, unreachable, its slots served by none; ShardDown is a
# ConnectionError), as the status reads show one "unavailable": an error the node answered
# (WRONGTYPE, NOPERM, a script's) is not one, and fails the read as a whole
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, SlotNotCoveredError, ClusterDownError,
               OSError)
FIRST_DELAY_SECONDS = 0.1
MAX_DELAY_SECONDS = 5.0

_R = TypeVar("_R")


def _named(name: str) -> tuple[str, str]:
    return ("shard" if "#" in name else "queue"), name


class ShardDown(RedisConnectionError):
    """A call skipped because its shard failed moments ago and is still set aside;
    ``reason``: the error of that failure."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class PartialControl(RedisConnectionError):
    """A pause or resume (of a queue, or of one group of it) that reached some shards of a
    sharded queue and failed on the others: ``reached`` and ``failed`` (shard -> its
    error) name them. The reached shards keep the change; running it again completes it."""

    def __init__(self, what: str, reached: list[str], failed: dict[str, str]) -> None:
        total = len(reached) + len(failed)
        super().__init__("%s reached %d of %d shards (%s), not %s: run it again to complete "
                         "it" % (what, len(reached), total, ", ".join(reached) or "none",
                                 "; ".join("%s (%s)" % item for item in failed.items())))
        self.reached, self.failed = reached, failed


class ShardHealth:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}
        self._delay: dict[str, float] = {}
        self._error: dict[str, str] = {}
        self.failures = 0  # calls that found a node unreachable (a sign of an outage)

    @staticmethod
    def as_down(name: str, exc: BaseException) -> BaseException:
        """``exc``, raised by a call on data set ``name`` whose node does not answer, as
        the ``ShardDown`` the calls after it raise while ``name`` is set aside (its cause
        ``exc``): one error for the callers of the calls by job id, first try included."""
        if isinstance(exc, ShardDown):
            return exc
        reason = str(exc)[:200] or type(exc).__name__
        down = ShardDown("%s %r is unavailable (%s)" % (*_named(name), reason), reason)
        down.__cause__ = exc
        return down

    def down(self, name: str) -> bool:
        """Whether shard ``name`` is set aside now (it failed, its delay is running)."""
        return self.clock() < self._until.get(name, 0.0)

    def remaining_ms(self, name: str) -> float:
        """How long shard ``name`` is still set aside, in ms (0: it may be tried)."""
        return max(0.0, self._until.get(name, 0.0) - self.clock()) * 1000

    def failing(self) -> dict[str, float]:
        """Shard -> ms it is still set aside, for the shards whose last call failed."""
        with self._lock:
            return {name: self.remaining_ms(name) for name in self._delay}

    def run(self, name: str, call: Callable[[], _R]) -> _R:
        """``call()`` on shard ``name``, unless it is set aside (``ShardDown``, at once);
        a failure sets it aside, a success forgets its failure."""
        if self.down(name):
            reason = self._error.get(name, "failed")
            raise ShardDown("%s %r is unavailable (%s); tried again in %.1fs" % (
                *_named(name), reason, self.remaining_ms(name) / 1000), reason)
        try:
            result = call()
        except ERRORS as exc:
            self.failed(name, exc)
            raise
        if name in self._delay:
            self.worked(name)
        return result

    def failed(self, name: str, exc: BaseException) -> None:
        with self._lock:
            delay = min(max(2 * self._delay.get(name, 0.0), FIRST_DELAY_SECONDS),
                        MAX_DELAY_SECONDS)
            first = name not in self._delay
            self._delay[name] = delay
            self._until[name] = self.clock() + delay
            self._error[name] = str(exc)[:200]
            self.failures += isinstance(exc, UNREACHABLE)
        log = logger.warning if first or delay >= MAX_DELAY_SECONDS else logger.debug
        # the error as Python's repr (escaped), not logtext.shown: this module stays at
        # the end of the import chain (docs/internals.md, "Shape"); cut as an error's text
        log("%s %r: Redis unavailable (%r); the queues and shards of the other nodes go "
            "on, this one is tried again in %.1fs", *_named(name), str(exc)[:2000], delay)

    def worked(self, name: str) -> None:
        with self._lock:
            was = self._delay.pop(name, None)
            self._until.pop(name, None)
            self._error.pop(name, None)
        if was is not None:
            logger.warning("%s %r: Redis answers again", *_named(name))
