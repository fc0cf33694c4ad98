"""Reads for operators and the process around the engine: the server itself (is it up,
how is it configured), the head of a queue, the event stream, the wake channels, and
the workers registry.

None of these is on the claim/ack path; each is one command (or one per cluster
primary), bounded by its ``count`` where it reads a list.

**The wake channels** (``WakeListener``): a thread that listens to the queues' wake
channels and tells its owner about earlier jobs. Enqueue scripts PUBLISH the new
earliest due time of a queue when it moves earlier.
This thread records it and sets the owner's event (``Engine.wake_listener``), so an
idle worker sleeps on a local timer to the exact due time yet learns at once about a
job due sooner. A lost
message costs at most ``WAKE_INTERVAL_SECONDS``: the worker polls at least that often.

The thread never dies of what it hears: a message that is not a due time a script
could have sent (not a number, inf, nan, beyond year 9999, not UTF-8, on a channel we
did not subscribe) is ignored with a DEBUG log, and any error of its own ends in a new
connection after a back-off (a dropped connection does too), never in a dead thread.

On a Redis Cluster a classic PUBLISH (the scripts') reaches every node, so one
subscription on any node hears every queue. Each (re)connection takes the next
primary in turn: a node that is down never silences the queues of the others. A node
the client marked stalled (engine/stalls.py: a call on it timed out) is left at once
and skipped while marked, as its subscription hears nothing. The
subscription holds a connection of its own, outside the cluster client's pools: their
refreshes (one per command failing on a node that is down) would reconnect it
silently and lose the messages of the gap.

Through Redis Sentinel (``redis+sentinel://``) the subscription comes from the client's
``SentinelConnectionPool``: each (re)connection asks the sentinels for the current master,
so after a failover the next subscription is on the promoted replica.

**The workers registry**: who is alive, and what each worker says about itself.

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

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis import ConnectionPool, Redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisError, ResponseError
from redis.sentinel import SentinelConnectionPool

from django_delayq.engine.base import RedisOwner
from django_delayq.engine.logtext import shown
from django_delayq.engine.replies import entry_order, envelope_text
from django_delayq.engine.server_mode import check_server_mode
from django_delayq.engine.shard_health import ERRORS
from django_delayq.engine.stalls import check_stall, own_connection_kwargs

if TYPE_CHECKING:
    from django_delayq.engine.client import RedisClient

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.05  # read_events over several streams of a cluster: how often polled
Entry = tuple[Any, dict[Any, Any]]  # a stream entry as redis-py returns it: (id, fields)
StreamEntry = tuple[str, Any, dict[Any, Any]]  # (its stream's name, id, fields)
MAX_WORKERS_READ = 1000  # the most recent heartbeats read by ``workers``
MAX_WORKER_ID_BYTES = 512  # a longer id is skipped (ids are host:pid:token, a --worker-id)
MAX_INFO_BYTES = 64 * 1024  # one info entry (a worker's: under 40 KiB with 50 jobs shown)
MAX_INFO_TOTAL_BYTES = 4 * 1024 * 1024  # all info entries of one read
# The due times a script can announce: what a datetime can hold (years 1..9999), in ms.
MIN_DUE_MS, MAX_DUE_MS = -62_135_596_800_000, 253_402_300_799_999
MAX_MESSAGE_BYTES = 32  # a due time is at most 16 digits; anything longer is noise


def _merged(reply: Any, count: int) -> list[StreamEntry]:
    """The entries of XREAD replies ([(stream, entries)], RESP2) by entry id, the first
    ``count``. Each stream gave at most ``count`` in its order, so none left unread
    comes before the last one kept: the next read goes on in order."""
    found = [(envelope_text(stream), entry_id, fields)
             for stream, entries in reply or [] for entry_id, fields in entries]
    return sorted(found, key=lambda e: entry_order(e[1]))[:count]


def _size(value: bytes | str) -> int:
    return len(value) if isinstance(value, bytes) else len(value.encode(errors="replace"))


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What one Redis server says of its memory and persistence. ``node`` names the
    cluster primary ("host:port"), None for a single server; ``save`` is None when
    CONFIG is disabled (managed Redis), as ``full_coverage`` is (a cluster node's
    ``cluster-require-full-coverage`` is ``yes``), which is also None for a single server,
    and ``min_replicas`` (a master's ``min-replicas-to-write``), asked only of a master
    reached through Sentinel."""

    node: str | None
    memory: dict[str, Any]
    persistence: dict[str, Any]
    save: str | None
    full_coverage: bool | None = None
    min_replicas: str | None = None


def _config(client: RedisClient, name: str) -> str | None:
    """``CONFIG GET name``'s value, or None when CONFIG is refused (managed Redis, ACL)."""
    try:
        reply: dict[Any, Any] = client.config_get(name)  # bytes keys, or text ones
    except ResponseError:
        return None
    return envelope_text(reply.get(name, reply.get(name.encode(), "")))


def _server_info(client: RedisClient, node: str | None) -> ServerInfo:
    coverage = None if node is None else _config(client, "cluster-require-full-coverage")
    sentinel = isinstance(getattr(client, "connection_pool", None), SentinelConnectionPool)
    return ServerInfo(node=node, memory=client.info("memory"),
                      persistence=client.info("persistence"), save=_config(client, "save"),
                      full_coverage=None if coverage is None else coverage == "yes",
                      min_replicas=_config(client, "min-replicas-to-write") if sentinel else None)


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    """One registered worker: id, last heartbeat (Redis ms) and its info as written
    (None when absent; any text: a worker's, or whatever else wrote it)."""

    id: str
    beat_ms: float
    info: str | None
    info_bytes_unread: int = 0  # an info entry over the read limits: its size, not read


class WakeListener:
    """A daemon thread subscribed to ``channels`` (channel -> queue); ``take()`` hands
    over the earliest due time announced per queue since the last call."""

    def __init__(self, client: RedisClient, channels: dict[str, str],
                 event: threading.Event) -> None:
        self.client = client
        self.channels = channels  # channel -> queue
        self.event = event
        self.earliest: dict[str, int] = {}  # queue -> earliest due_ms announced
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="delayq-wake", daemon=True)
        self._connections = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(1.0)

    def take(self) -> dict[str, int]:
        with self._lock:
            announced, self.earliest = self.earliest, {}
        return announced

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            pubsub = None
            try:
                pubsub = self._pubsub()
                pubsub.subscribe(*self.channels)
                backoff = 0.1
                self._announce(dict.fromkeys(self.channels.values(), 0))  # (re)subscribed:
                # anything may have been missed, so every queue is worth a claim now
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.25)
                    if message and message.get("type") == "message":
                        self._record(message)
                    check_stall(pubsub.connection)  # a stalled node: the next one
            except Exception as exc:  # noqa: BLE001 - the listener must never die
                if self._stop.is_set():
                    return
                if isinstance(exc, (RedisError, OSError)):
                    logger.warning("wake listener lost Redis (%s); retrying in %.1fs", shown(exc),
                                   backoff)
                else:
                    logger.exception("wake listener failed; reconnecting in %.1fs", backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        pubsub.close()

    def _pubsub(self) -> Any:
        self._connections += 1
        if not isinstance(self.client, RedisCluster):
            return self.client.pubsub(ignore_subscribe_messages=True)
        stalls = getattr(self.client, "stalls", None)  # StallAwareCluster's
        nodes = [n for n in self.client.get_primaries()
                 if stalls is None or not stalls.stalled(n.name)] or self.client.get_primaries()
        node = nodes[self._connections % len(nodes)]
        return _own_client(self.client, node).pubsub(ignore_subscribe_messages=True)

    def _record(self, message: dict[str, Any]) -> None:
        """Announce the due time a message carries; ignore (DEBUG) anything else: a
        message on a channel not ours, or not a due time a script could have sent."""
        try:
            queue = self.channels.get(envelope_text(message.get("channel")))
            if queue is None:
                raise ValueError("not one of our channels")
            data = message.get("data")
            if isinstance(data, bytes):
                data = data.decode("ascii")
            if not isinstance(data, (str, int, float)) or len(str(data)) > MAX_MESSAGE_BYTES:
                raise ValueError("not a due time")
            value = float(data)
            if not MIN_DUE_MS <= value <= MAX_DUE_MS:  # also inf and nan
                raise ValueError("not a due time in years 1..9999")
        except Exception as exc:  # noqa: BLE001 - a message can hold anything
            logger.debug("wake listener: ignored message %.100r: %s", message, shown(exc))
            return
        self._announce({queue: int(value)})

    def _announce(self, earliest: dict[str, int]) -> None:
        with self._lock:
            for queue, due in earliest.items():
                if due < self.earliest.get(queue, due + 1):
                    self.earliest[queue] = due
        self.event.set()


def _own_client(cluster: RedisCluster, node: ClusterNode) -> Redis:
    """A client of ``node`` with a pool of its own (same address, credentials, TLS and
    timeouts). The cluster client's pools do not suit a subscription: every command that
    fails on a node that is down makes that client refresh its view of the cluster, and
    a refresh marks every connection of the pools it asks for a reconnect, the
    subscription's too; redis-py then reconnects and subscribes again inside
    ``get_message`` without a word, and a wake message published meanwhile is lost (the
    job waited for the next poll). This connection ends only on a real error, which
    ``_run`` answers with a new connection and a claim of every queue."""
    pool = cluster.get_redis_connection(node).connection_pool
    return Redis(connection_pool=ConnectionPool(connection_class=pool.connection_class,
                                                **own_connection_kwargs(pool.connection_kwargs)))


class ServerReads(RedisOwner):
    def ping(self) -> bool:
        """Whether Redis answers (raises the client's error when it does not), in the mode
        its URL names: ``WrongRedisMode`` for a Redis Cluster node behind a plain URL
        (``check_server_mode``; a cluster URL's client checked it when it was made)."""
        answered = bool(self.client.ping())
        check_server_mode(self.client)
        return answered

    def server_info(self) -> list[ServerInfo]:
        """Memory and persistence settings of the server, or of each cluster primary."""
        if not isinstance(self.client, RedisCluster):
            return [_server_info(self.client, None)]
        return [_server_info(self.client.get_redis_connection(node), node.name)
                for node in self.client.get_primaries()]

    def oldest_pending(self, queue: str) -> tuple[str, float] | None:
        """(id, due ms) of the earliest job of ``queue`` waiting to be claimed, if any
        (the id decoded, bytes that are not UTF-8 replaced): the oldest due job, else the
        next one to come due, as lua/stats.lua reads them (a job whose score is not a
        time is left out)."""
        r = self._script("stats", queue, [self._now(None)])
        due, raw = (r[6], r[8]) if int(r[6]) >= 0 else (r[5], r[9])
        return None if int(due) < 0 else (envelope_text(raw), float(due))

    # -- the event stream ---------------------------------------------------------------

    def event_stream_of(self, queue: str, job_id: str) -> str:
        """The stream an event of ``job_id`` in ``queue`` is written to (engine/event_log.py)."""
        return self.global_keys.events

    def event_streams(self) -> list[str]:
        """Every stream the events of this prefix are written to."""
        return [self.global_keys.events]

    def last_events(self, count: int) -> list[Entry]:
        """The last ``count`` entries of the event streams, oldest first (raw replies)."""
        return self.event_tail(count)[0]

    def event_tail(self, count: int) -> tuple[list[Entry], dict[str, str]]:
        """``last_events(count)``, and the cursors to follow them with (``read_events``):
        each stream's last entry id, "0-0" for an empty one. A stream that cannot be read
        (its node down) is left out of the entries; its cursor is the highest of the
        others."""
        streams = self.event_streams()
        found: list[Entry] = []
        cursors: dict[str, str] = {}
        for key in streams:
            try:
                tail = self.client.xrevrange(key, count=max(1, count))
            except ERRORS:  # a node down: its stream is left out
                if len(streams) == 1:
                    raise
                continue
            found += tail
            cursors[key] = envelope_text(tail[0][0]) if tail else "0-0"
        top = max(cursors.values(), key=entry_order, default="0-0")
        return (sorted(found, key=lambda e: entry_order(e[0]))[-max(1, count):],
                {key: cursors.get(key, top) for key in streams})

    def read_events(self, cursors: Mapping[str, str], *, block_ms: int = 1000,
                    count: int = 100) -> list[StreamEntry]:
        """Up to ``count`` entries of the streams of ``cursors`` (stream -> id of the
        last entry read from it; ``event_tail`` gives the first ones), each stream's after
        its own id, as (stream, id, fields) merged by entry id; waits up to ``block_ms``
        for the first one (``[]`` when none came). The caller moves the cursor of each
        stream to the last entry it took of it: ids of two streams are in no one order
        (each node's clock, and a count of its own within a millisecond), so one cursor
        for all would skip entries. One Redis: one XREAD BLOCK for all the streams. A
        Redis Cluster (a sharded queue's streams are on their shards' nodes, each in a
        slot of its own): one XREAD per stream, polled every ``POLL_SECONDS``, a stream
        whose node is down left out."""
        if not isinstance(self.client, RedisCluster) or len(cursors) == 1:
            return _merged(self.client.xread(dict(cursors), block=block_ms, count=count),
                           count)
        deadline = time.monotonic() + block_ms / 1000
        while True:
            replies: list[Any] = []
            for key, after in cursors.items():
                try:
                    replies += self.client.xread({key: after}, count=count) or []
                except ERRORS:
                    continue
            if replies or time.monotonic() >= deadline:
                return _merged(replies, count)
            time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    # -- the wake channels --------------------------------------------------------------

    def wake_listener(self, queues: Iterable[str], event: threading.Event) -> WakeListener:
        """A (not yet started) listener of the wake channels of ``queues`` that sets
        ``event`` whenever a job of theirs becomes due earlier than announced before."""
        return WakeListener(self.client, {self.keys(q).channel: q for q in queues}, event)

    # -- the workers registry -----------------------------------------------------------

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

    def beats_since(self, since_ms: float) -> list[tuple[str, float]]:
        """Every worker heard from at or after ``since_ms``: its id and last heartbeat
        (Redis ms)."""
        found = self.client.zrangebyscore(self.global_keys.workers, since_ms, "+inf",
                                          withscores=True)
        return [(envelope_text(raw), float(score)) for raw, score in found]

    def count_workers(self, since_ms: float) -> int:
        """How many workers were heard from at or after ``since_ms`` (Redis ms)."""
        return int(self.client.zcount(self.global_keys.workers, since_ms, "+inf"))
