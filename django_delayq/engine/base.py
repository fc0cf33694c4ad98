"""What the ``Engine``'s method groups (``registry``, ``outbox``, ``server``) rely on.

The ``Engine`` class is assembled from these groups so that each Redis concern keeps a
module of its own; every group reaches Redis through ``client`` and names its keys with
``keys()`` (one queue) or ``global_keys`` (every queue under the prefix), never by hand.
``RedisOwner`` only declares them: ``Engine`` (engine.py) provides every one, so a group
imports no more of the engine than it uses itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

    def _script(self, name: str, queue: str, args: list[Any], **extra: str | None) -> Any:
        """Run script ``name`` on ``queue``'s keys (``extra``: keys the caller names)."""
        raise NotImplementedError

    def _per_item(self, name: str, queue: str, now_ms: int | None, head: list[Any],
                  rows: Sequence[Sequence[Any]]) -> list[int]:
        """Script ``name`` over ``rows`` (each item's ARGV), in calls of at most its bound
        of items, each with ARGV now, ``head``, then its rows; one integer per row."""
        raise NotImplementedError

    @property
    def global_keys(self) -> GlobalKeys:
        """The key names shared by every queue under this engine's prefix."""
        raise NotImplementedError
