"""What the ``Engine``'s method groups (``registry``, ``outbox``, ``server``) share.

The ``Engine`` class is assembled from these groups so that each Redis concern keeps a
module of its own; every group reaches Redis through ``client`` and ``_run`` (one
script call) and names its keys with ``keys()`` (one queue) or ``global_keys`` (every
queue under the prefix), never by hand. ``RedisOwner`` holds the client, the prefix,
the clock and the script plumbing, so a group imports no more of the engine than it
uses itself (and this module imports only ``keys`` and ``scripts``: it stays at the
bottom of the chains).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django_delayq.engine import scripts
from django_delayq.engine.keys import GlobalKeys, QueueKeys
from django_delayq.engine.replies import chunks


class RedisOwner:
    """The client, the key prefix, the server clock and the scripts' calls."""

    def __init__(self, client: Any, prefix: str = "delayq",
                 clock: Callable[[], int] | None = None) -> None:
        """``clock``: a function giving "now" in ms for every script, instead of the Redis
        server's ``TIME`` (tests and ``django_delayq.testing`` pass one; production never
        does: one clock, the server's, for every worker). A ``now_ms`` given to a method
        wins over both."""
        self.client = client
        self.prefix = prefix
        self.clock = clock
        self._keys: dict[str, QueueKeys] = {}
        self._script_keys: dict[tuple[str, str], tuple[str, ...]] = {}  # (script, queue)

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
        keys = self._keys.get(queue)
        if keys is None:
            keys = self._keys[queue] = QueueKeys(self.prefix, queue)
        return keys

    @property
    def global_keys(self) -> GlobalKeys:
        """The key names shared by every queue under this engine's prefix."""
        return GlobalKeys(self.prefix)

    def _keys_of(self, name: str, queue: str) -> tuple[str, ...]:
        """The ``KEYS`` of script ``name`` on ``queue``, built once per pair (the job
        threads' and the claimer's paths ask for them at every call)."""
        keys = self._script_keys.get((name, queue))
        if keys is None:
            keys = self._script_keys[(name, queue)] = scripts.keys_of(name, self.keys(queue))
        return keys

    def _run(self, name: str, keys: tuple[str, ...], args: list[Any]) -> Any:
        """Run script ``name`` (scripts.load) with ``keys`` and ``args``."""
        return scripts.load(name)(self.client, keys, args)

    def _script(self, name: str, queue: str, args: list[Any], **extra: str | None) -> Any:
        """Run script ``name`` on ``queue``'s keys (``extra``: keys the caller names)."""
        keys = scripts.keys_of(name, self.keys(queue), **extra) if extra else \
            self._keys_of(name, queue)
        return self._run(name, keys, args)

    def _per_item(self, name: str, queue: str, now_ms: int | None, head: list[Any],
                  rows: Sequence[Sequence[Any]]) -> list[int]:
        """Script ``name`` over ``rows`` (each item's ARGV), in calls of at most its bound
        of items, each with ARGV now, ``head``, then its rows; one integer per row."""
        keys, size = self._keys_of(name, queue), scripts.BOUNDS[name].items
        out: list[int] = []
        for part in chunks(rows, size):
            args = [self._now(now_ms), *head, *(value for row in part for value in row)]
            out += [int(r) for r in self._run(name, keys, args)]
        return out

    def _flags(self, name: str, queue: str, now_ms: int | None, head: list[Any],
               rows: Sequence[Sequence[Any]]) -> list[bool]:
        """``_per_item`` of a script answering 1 (done) or 0 (the lease was lost) per row."""
        return [bool(r) for r in self._per_item(name, queue, now_ms, head, rows)]
