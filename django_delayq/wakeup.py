"""Listens to the queues' wake channels and tells the worker about earlier jobs.

Enqueue scripts PUBLISH the new earliest due time of a queue when it moves earlier.
This thread records it and sets the worker's event, so an idle worker sleeps on a
local timer to the exact due time yet learns at once about a job due sooner. A lost
message costs at most ``WAKE_INTERVAL_SECONDS``: the worker polls at least that often.

On a Redis Cluster a classic PUBLISH (the scripts') reaches every node, so one
subscription on any node hears every queue. Each (re)connection takes the next
primary in turn: a node that is down never silences the queues of the others.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)


class WakeListener:
    def __init__(self, client: Any, channels: dict[str, str], event: threading.Event) -> None:
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
            except (RedisError, OSError) as exc:
                if self._stop.is_set():
                    return
                logger.warning("wake listener lost Redis (%s); retrying in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except Exception:  # noqa: BLE001
                        pass

    def _pubsub(self) -> Any:
        self._connections += 1
        if not isinstance(self.client, RedisCluster):
            return self.client.pubsub(ignore_subscribe_messages=True)
        nodes = self.client.get_primaries()
        node = nodes[self._connections % len(nodes)]
        return self.client.pubsub(node=node, ignore_subscribe_messages=True)

    def _record(self, message: dict[str, Any]) -> None:
        channel = message["channel"]
        channel = channel.decode() if isinstance(channel, bytes) else channel
        queue = self.channels.get(channel)
        if queue is None:
            return
        try:
            due = int(float(message["data"]))
        except (TypeError, ValueError):
            return
        self._announce({queue: due})

    def _announce(self, earliest: dict[str, int]) -> None:
        with self._lock:
            for queue, due in earliest.items():
                if due < self.earliest.get(queue, due + 1):
                    self.earliest[queue] = due
        self.event.set()


def monotonic_ms() -> float:
    return time.monotonic() * 1000
