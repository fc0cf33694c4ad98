"""A Redis Cluster node that stalls costs one reply timeout, then counts as down.

A node that accepts connections but does not answer (SIGSTOPped, a paused VM, a path
that drops packets) holds a call for the client's reply timeout (5 s). redis-py's
cluster client then refreshes its view of the slots and sends the call again to the
node that holds the slot, the same one, up to 10 times: 55 s a call, during which the
calling thread (a worker's claim loop, a ``schedule()``) waits. A node that is down
refuses at once, and everything above the client (``ShardHealth``, the worker's
``QueueBackoff``, the held outcomes of ``Settler.send``, the outbox) treats it as down.

``StallAwareCluster`` (the client of ``redis+cluster://`` URLs) makes a stalled node
look the same after its first timeout, and keeps redis-py's retries for what they are
for: following MOVED and ASK after a slot moved, TRYAGAIN, CLUSTERDOWN during a
failover, a refreshed slot map (a client without retries broke a MULTI after a slot
moved). Its pools' connections are ``StallGuard`` connections:

* a reply (or a connect) that times out marks its node stalled (``NodeStalls``);
* while it is marked, every call on that node fails at once with ``NodeStalled``, a
  ``ConnectionError`` like a refused connection: a command, a pipeline, a MULTI, a
  refresh of the slots that asks that node, the wake listener's subscription. redis-py's
  cluster client retries only the exact error types it lists, so it does not retry
  that one, and ``StallRetry`` tells the retry of a MULTI so: a call that met a stalled
  node ends after one timeout, plus one refresh of the slots (a node that failed over
  meanwhile is followed to its replica);
* a thread per marked node probes it: one PING on a connection of its own, waited for
  until it is answered (a new connection and PING when that connection fails); the
  answer removes the mark, and the next call goes through;
* the default node, which keyless commands go to (TIME, PING, INFO, the key look-up of
  XREAD), is never a marked node while another primary is not: redis-py's refresh of
  the slots sets it back to the first primary, stalled or not.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import Connection, ConnectionPool, SSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

logger = logging.getLogger(__name__)

PROBE_POLL_SECONDS = 0.5  # a probe waiting for its PONG looks this often whether to stop
PROBE_PAUSE_SECONDS = 1.0  # after a probe's connection failed, before the next one
PROBE_RENEW_SECONDS = 30.0  # a PING unanswered this long: a new connection, a new PING
# redis-py's own cluster retry: 10 times, jittered 10 ms doubling to 1 s
RETRIES, RETRY_BASE_SECONDS, RETRY_CAP_SECONDS = 10, 0.01, 1.0
# What ties a node's pool to the cluster client that made it (its connect hook, shared
# registries): not for a connection of one's own (a probe's, the wake subscription's).
CLUSTER_BOUND = ("redis_connect_func", "himport_registry",
                 "oss_cluster_maint_notifications_handler")


class NodeStalled(RedisConnectionError):
    """A call refused at once: its node did not answer within the reply timeout, and
    has not answered a probe since."""


def own_connection_kwargs(pool: ConnectionPool) -> dict[str, Any]:
    """The keyword arguments of a connection to ``pool``'s node (address, credentials,
    TLS, timeouts), without what binds them to the cluster client."""
    return {k: v for k, v in pool.connection_kwargs.items() if k not in CLUSTER_BOUND}


class NodeStalls:
    """The nodes ("host:port") of one cluster client that stalled, and their probes.
    ``connect(name)``: a connection to that node that is not guarded, or None when the
    node is no longer the client's (or the client is gone): the mark is dropped."""

    def __init__(self, connect: Callable[[str], Connection | None]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}  # read without the lock: one dict look-up
        self._why: dict[str, str] = {}
        self._closed = threading.Event()

    def stalled(self, name: str) -> bool:
        return name in self._since

    def check(self, name: str) -> None:
        """Raise ``NodeStalled`` when node ``name`` is marked."""
        since = self._since.get(name)
        if since is not None:
            raise NodeStalled("Redis Cluster node %s did not answer (%s) %.1fs ago; calls to "
                              "it fail at once until it answers" % (
                                  name, self._why.get(name, "timeout"), time.monotonic() - since))

    def timed_out(self, name: str, exc: BaseException) -> None:
        """Node ``name`` did not answer in time: mark it, and start its probe."""
        with self._lock:
            if name in self._since or self._closed.is_set():
                return
            self._why[name] = str(exc)[:200]
            self._since[name] = time.monotonic()
        logger.warning("Redis Cluster node %s did not answer (%r): its queues and shards are "
                       "treated as down until it answers a probe", name, str(exc)[:200])
        threading.Thread(target=self._probe, args=(name,), name="delayq-probe %s" % name,
                         daemon=True).start()

    def close(self) -> None:
        """Stop the probes (the client is closed)."""
        self._closed.set()

    def _probe(self, name: str) -> None:
        answered: bool | None = False
        while answered is False and not self._closed.is_set():
            answered = self._ping(name)
            if answered is False:
                self._closed.wait(PROBE_PAUSE_SECONDS)
        with self._lock:
            since = self._since.pop(name, None)
            self._why.pop(name, None)
        if answered and since is not None:
            logger.warning("Redis Cluster node %s answers again (after %.1fs)", name,
                           time.monotonic() - since)

    def _ping(self, name: str) -> bool | None:
        """One PING, waited for: True once answered (an error answered too: LOADING,
        NOAUTH), False when the connection failed or the wait ran out, None when the node
        is no longer to be probed."""
        conn = self._connect(name)
        if conn is None:
            return None
        try:
            conn.connect()
            conn.send_command("PING")
            renew = time.monotonic() + PROBE_RENEW_SECONDS
            while time.monotonic() < renew and not self._closed.is_set():
                if conn.can_read(timeout=PROBE_POLL_SECONDS):
                    with contextlib.suppress(ResponseError):
                        conn.read_response(disconnect_on_error=False)
                    return True
            return False
        except (RedisError, OSError):
            return False
        finally:
            conn.disconnect()


class StallGuard(Connection):
    """The connection of a ``StallAwareCluster``'s pools (``guarded`` makes the class of
    each client, bound to its ``NodeStalls``)."""

    stalls: NodeStalls
    unguarded: type[Connection] = Connection

    @property
    def node_name(self) -> str:
        return "%s:%s" % (self.host, self.port)  # redis-py's ClusterNode.name

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        self.stalls.check(self.node_name)
        try:
            super().connect_check_health(*args, **kwargs)
        except RedisTimeoutError as exc:  # the connect, or its handshake's reply
            self.stalls.timed_out(self.node_name, exc)
            raise

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self.stalls.check(self.node_name)
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except RedisTimeoutError as exc:
            if "timeout" not in kwargs:  # the reply timeout, not a wait the caller chose
                self.stalls.timed_out(self.node_name, exc)
            raise


def check_stall(conn: object) -> None:
    """Raise ``NodeStalled`` when ``conn`` is a ``StallGuard`` connection to a node marked
    stalled (a connection kept open, as a subscription's, sends nothing to find out)."""
    if isinstance(conn, StallGuard):
        conn.stalls.check(conn.node_name)


def guarded(base: type[Connection], stalls: NodeStalls) -> type[StallGuard]:
    """A ``StallGuard`` class over ``base`` (``Connection``, ``SSLConnection``)."""
    bases = (StallGuard,) if base is Connection else (StallGuard, base)
    return type("Stall" + base.__name__, bases, {"stalls": stalls, "unguarded": base})


class StallRetry(Retry):
    """redis-py's cluster retry (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a failover) that never
    retries a call on a stalled node (``NodeStalled``). A MULTI's retry is a copy of it."""

    def call_with_retry(self, do: Callable[[], Any], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> Any:
        def retryable(error: Exception) -> bool:
            return not isinstance(error, NodeStalled) and (is_retryable is None
                                                           or is_retryable(error))
        return super().call_with_retry(do, fail, retryable, with_failure_count)


class StallAwareCluster(RedisCluster):
    """A ``RedisCluster`` on which a stalled node costs one reply timeout (module
    docstring). Takes ``RedisCluster``'s keyword arguments; a ``rediss://`` URL keeps
    TLS. Without a URL, the first startup node (or ``host`` and ``port``) makes one:
    redis-py takes a connection class only for the pools of a client made from a URL."""

    def __init__(self, url: str | None = None, **kwargs: Any) -> None:
        if url is None:
            first = next(iter(kwargs.get("startup_nodes") or []), None)
            host = kwargs.pop("host", None) or (first.host if first else "localhost")
            port = kwargs.pop("port", None) or (first.port if first else 6379)
            url = "redis://%s:%s" % ("[%s]" % host if ":" in host else host, port)
        base = kwargs.pop("connection_class", None)
        if url.startswith("rediss://"):  # redis-py would set its own
            url, base = "redis://" + url[len("rediss://"):], base or SSLConnection  # class
        self.stalls = NodeStalls(self._probe_connection_of(weakref.ref(self)))
        kwargs["connection_class"] = guarded(base or Connection, self.stalls)
        kwargs.setdefault("retry", StallRetry(ExponentialWithJitterBackoff(
            base=RETRY_BASE_SECONDS, cap=RETRY_CAP_SECONDS), retries=RETRIES))
        super().__init__(url=url, **kwargs)

    @staticmethod
    def _probe_connection_of(ref: weakref.ref[StallAwareCluster]
                             ) -> Callable[[str], Connection | None]:
        def connect(name: str) -> Connection | None:
            client: Any = ref()
            node = None if client is None else client.get_node(node_name=name)
            if node is None or node.redis_connection is None:
                return None
            pool = node.redis_connection.connection_pool
            unguarded = getattr(pool.connection_class, "unguarded", pool.connection_class)
            # no CLIENT SETINFO at connect: its reply would be one more wait
            return unguarded(**own_connection_kwargs(pool), driver_info=None)  # type: ignore[no-any-return]
        return connect

    def get_default_node(self) -> ClusterNode | None:
        """The node of keyless commands: another primary when it is stalled."""
        node: ClusterNode | None = super().get_default_node()  # type: ignore[no-untyped-call]
        if node is not None and self.stalls.stalled(node.name):
            primaries: list[ClusterNode] = self.get_primaries()  # type: ignore[no-untyped-call]
            answering = [n for n in primaries if not self.stalls.stalled(n.name)]
            if answering:
                node = random.choice(answering)
                self.replace_default_node(node)
        return node

    def close(self) -> None:
        self.stalls.close()
        super().close()
