"""What the ``Engine``'s method groups (``registry``, ``outbox``, ``server``) rely on.

The ``Engine`` class is assembled from these groups so that each Redis concern keeps a
module of its own; every group reaches Redis through ``client`` and names its keys with
``keys()`` (one queue) or ``global_keys`` (every queue under the prefix), never by hand.
"""

from __future__ import annotations

from typing import Any

from django_delayq.engine.keys import GlobalKeys, QueueKeys


class RedisOwner:
    """The client, the key prefix and the server clock (``Engine`` provides them)."""

    client: Any
    prefix: str

    def keys(self, queue: str) -> QueueKeys:
        """The key names of ``queue``."""
        raise NotImplementedError

    def time_ms(self) -> int:
        """Now on the Redis clock (ms)."""
        raise NotImplementedError

    def _run(self, name: str, keys: tuple[str, ...], args: list[Any]) -> Any:
        """Run script ``name`` (scripts.load) with ``keys`` and ``args``."""
        raise NotImplementedError

    def _now(self, now_ms: int | None) -> int:
        """The ``now_ms`` argument of a script: given, the clock's, or 0 (Redis TIME)."""
        raise NotImplementedError

    @property
    def global_keys(self) -> GlobalKeys:
        """The key names shared by every queue under this engine's prefix."""
        return GlobalKeys(self.prefix)
