"""What the ``Engine``'s method groups (``registry``, ``outbox``, ``server``) rely on.

The ``Engine`` class is assembled from these groups so that each Redis concern keeps a
module of its own; every group reaches Redis through ``client`` and names its keys with
``keys()`` (one queue) or ``global_keys`` (every queue under the prefix), never by hand.
``RedisOwner`` holds the client, the prefix and the clock; the methods it only declares
``Engine`` (engine.py) provides, so a group imports no more of the engine than it uses
itself (and this module imports none of it: it stays at the bottom of the chains).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.cluster import RedisCluster

if TYPE_CHECKING:
    from django_delayq.engine.keys import GlobalKeys, QueueKeys


class RedisOwner:
    """The client, the key prefix and the server clock."""

    def __init__(self, client: Any, prefix: str = "delayq",
                 clock: Callable[[], int] | None = None) -> None:
        """``clock``: a function giving "now" in ms for every script, instead of the Redis
        server's ``TIME`` (tests and ``django_delayq.testing`` pass one; production never
        does: one clock, the server's, for every worker). A ``now_ms`` given to a method
        wins over both."""
        self.client = client
        self.prefix = prefix
        self.clock = clock

    @property
    def nodes_fail_alone(self) -> bool:
        """Whether one node can fail while the others answer (a Redis Cluster's client);
        else a failure means Redis is unavailable."""
        return isinstance(self.client, RedisCluster)

    def time_ms(self) -> int:
        """Now on the Redis clock (ms), or the engine's ``clock``."""
        if self.clock is not None:
            return int(self.clock())
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def _now(self, now_ms: int | None) -> int:
        """The ``now_ms`` argument of a script: given, the clock's, or 0 (read Redis TIME)."""
        if now_ms is not None:
            return int(now_ms)
        return 0 if self.clock is None else int(self.clock())

    def keys(self, queue: str) -> QueueKeys:
        """The key names of ``queue``."""
        raise NotImplementedError

    @property
    def global_keys(self) -> GlobalKeys:
        """The key names shared by every queue under this engine's prefix."""
        raise NotImplementedError

    def _run(self, name: str, keys: tuple[str, ...], args: list[Any]) -> Any:
        """Run script ``name`` (scripts.load) with ``keys`` and ``args``."""
        raise NotImplementedError

    def _script(self, name: str, queue: str, args: list[Any], **extra: str | None) -> Any:
        """Run script ``name`` on ``queue``'s keys (``extra``: keys the caller names)."""
        raise NotImplementedError
