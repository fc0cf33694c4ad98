"""Reads for operators and the process around the engine: the server itself (is it up,
how is it configured), the head of a queue, the event stream, the wake channels.

None of these is on the claim/ack path; each is one command (or one per cluster
primary), bounded by its ``count`` where it reads a list.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from django_delayq.engine.base import RedisOwner
from django_delayq.engine.replies import entry_order, envelope_text
from django_delayq.engine.shard_health import ERRORS
from django_delayq.engine.wake import WakeListener

if TYPE_CHECKING:
    from django_delayq.engine.client import RedisClient

READY_LEVEL = 2 ** 44  # a ready score is (100 - priority) * READY_LEVEL + due_ms (lib.lua)
PRIORITY_LEVELS = 201
POLL_SECONDS = 0.05  # read_events over several streams: how often they are polled
Entry = tuple[Any, dict[Any, Any]]  # a stream entry as redis-py returns it: (id, fields)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What one Redis server says of its memory and persistence. ``node`` names the
    cluster primary ("host:port"), None for a single server; ``save`` is None when
    CONFIG is disabled (managed Redis)."""

    node: str | None
    memory: dict[str, Any]
    persistence: dict[str, Any]
    save: str | None


def _server_info(client: RedisClient, node: str | None) -> ServerInfo:
    try:
        reply: dict[Any, Any] = client.config_get("save")  # bytes keys, or text ones
        save: str | None = envelope_text(reply.get("save", reply.get(b"save", "")))
    except ResponseError:
        save = None
    return ServerInfo(node=node, memory=client.info("memory"),
                      persistence=client.info("persistence"), save=save)


class ServerReads(RedisOwner):
    def ping(self) -> bool:
        """Whether Redis answers (raises the client's error when it does not)."""
        return bool(self.client.ping())

    def server_info(self) -> list[ServerInfo]:
        """Memory and persistence settings of the server, or of each cluster primary."""
        if not isinstance(self.client, RedisCluster):
            return [_server_info(self.client, None)]
        return [_server_info(self.client.get_redis_connection(node), node.name)
                for node in self.client.get_primaries()]

    def oldest_pending(self, queue: str) -> tuple[str, float] | None:
        """(id, due ms) of the earliest job of ``queue`` waiting to be claimed, if any
        (the id decoded, bytes that are not UTF-8 replaced). Every job of ``ready`` is
        due no later than every job of ``pending``, so it is the earliest of ready when
        ready holds any: the first of one of its priority levels, read level by level
        (one command per level present, at most 201); else the head of pending."""
        k = self.keys(queue)
        head = self.client.zrange(k.pending, 0, 0, withscores=True)
        found = [(raw, float(due)) for raw, due in head]
        start: float | str = "-inf"
        for _ in range(PRIORITY_LEVELS):
            top = self.client.zrangebyscore(k.ready, start, "+inf", 0, 1, withscores=True)
            if not top or not 0 <= top[0][1] < PRIORITY_LEVELS * READY_LEVEL:
                break
            level = int(top[0][1] // READY_LEVEL)
            found.append((top[0][0], top[0][1] - level * READY_LEVEL))
            start = (level + 1) * READY_LEVEL
        if not found:
            return None
        raw, due_ms = min(found, key=lambda item: item[1])
        return envelope_text(raw), float(due_ms)

    # -- the event stream ---------------------------------------------------------------

    def event_stream_of(self, queue: str, job_id: str) -> str:
        """The stream an event of ``job_id`` in ``queue`` is written to (engine/event_log.py)."""
        return self.global_keys.events

    def event_streams(self) -> list[str]:
        """Every stream the events of this prefix are written to."""
        return [self.global_keys.events]

    def last_events(self, count: int) -> list[Entry]:
        """The last ``count`` entries of the event streams, oldest first (raw replies)."""
        found: list[Entry] = []
        for key in self.event_streams():
            try:
                found += self.client.xrevrange(key, count=max(1, count))
            except ERRORS:  # a node down: its stream is left out
                if len(self.event_streams()) == 1:
                    raise
        return sorted(found, key=lambda e: entry_order(e[0]))[-max(1, count):]

    def read_events(self, after: str, *, block_ms: int = 1000, count: int = 100
                    ) -> list[Entry]:
        """Up to ``count`` entries of the event streams after id ``after``, waiting up to
        ``block_ms`` for the first one (``[]`` when none came). Several streams (on
        several nodes) are polled every ``POLL_SECONDS`` and merged by entry id."""
        keys = self.event_streams()
        if len(keys) == 1:
            reply = self.client.xread({keys[0]: after}, block=block_ms, count=count)
            return [entry for _stream, entries in reply or [] for entry in entries]
        deadline = time.monotonic() + block_ms / 1000
        while True:
            found: list[Entry] = []
            for key in keys:
                try:
                    reply = self.client.xread({key: after}, count=count)
                except ERRORS:
                    continue
                found += [entry for _stream, entries in reply or [] for entry in entries]
            if found or time.monotonic() >= deadline:
                return sorted(found, key=lambda e: entry_order(e[0]))[:count]
            time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    # -- the wake channels --------------------------------------------------------------

    def wake_listener(self, queues: Iterable[str], event: threading.Event) -> WakeListener:
        """A (not yet started) listener of the wake channels of ``queues`` that sets
        ``event`` whenever a job of theirs becomes due earlier than announced before."""
        return WakeListener(self.client, {self.keys(q).channel: q for q in queues}, event)
