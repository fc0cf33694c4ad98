"""Listens to the queues' wake channels and tells its owner about earlier jobs.

Enqueue scripts PUBLISH the new earliest due time of a queue when it moves earlier.
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
primary in turn: a node that is down never silences the queues of the others. The
subscription holds a connection of its own, outside the cluster client's pools: their
refreshes (one per command failing on a node that is down) would reconnect it
silently and lose the messages of the gap.

Through Redis Sentinel (``redis+sentinel://``) the subscription comes from the client's
``SentinelConnectionPool``: each (re)connection asks the sentinels for the current master,
so after a failover the next subscription is on the promoted replica.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

from redis import ConnectionPool, Redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisError

if TYPE_CHECKING:
    from django_delayq.engine.client import RedisClient

logger = logging.getLogger(__name__)

# The due times a script can announce: what a datetime can hold (years 1..9999), in ms.
MIN_DUE_MS, MAX_DUE_MS = -62_135_596_800_000, 253_402_300_799_999
MAX_MESSAGE_BYTES = 32  # a due time is at most 16 digits; anything longer is noise


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
            except Exception as exc:  # noqa: BLE001 - the listener must never die
                if self._stop.is_set():
                    return
                if isinstance(exc, (RedisError, OSError)):
                    logger.warning("wake listener lost Redis (%s); retrying in %.1fs", exc,
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
        nodes = self.client.get_primaries()
        node = nodes[self._connections % len(nodes)]
        return _own_client(self.client, node).pubsub(ignore_subscribe_messages=True)

    def _record(self, message: dict[str, Any]) -> None:
        """Announce the due time a message carries; ignore (DEBUG) anything else."""
        try:
            queue, due = self._parse(message)
        except Exception as exc:  # noqa: BLE001 - a message can hold anything
            logger.debug("wake listener: ignored message %.100r: %s", message, exc)
            return
        self._announce({queue: due})

    def _parse(self, message: dict[str, Any]) -> tuple[str, int]:
        channel = message.get("channel")
        if isinstance(channel, bytes):
            channel = channel.decode("utf-8", "replace")
        queue = self.channels.get(channel) if isinstance(channel, str) else None
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
        return queue, int(value)

    def _announce(self, earliest: dict[str, int]) -> None:
        with self._lock:
            for queue, due in earliest.items():
                if due < self.earliest.get(queue, due + 1):
                    self.earliest[queue] = due
        self.event.set()


# What ties a node's pool to the cluster client that made it (its connect hook, shared
# registries): not for a connection of the listener's own.
_CLUSTER_BOUND = ("redis_connect_func", "himport_registry",
                  "oss_cluster_maint_notifications_handler")


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
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in _CLUSTER_BOUND}
    return Redis(connection_pool=ConnectionPool(connection_class=pool.connection_class,
                                                **kwargs))
