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
  that one; ``StallRetry`` tells the retry of a MULTI so, ``StallPipelineStrategy`` a
  pipeline's. Each call that meets the mark refreshes the slots, once a second at most
  a client (``StallNodesManager``): a replica promoted meanwhile is followed;
* a thread per marked node probes it: one PING on a connection of its own, waited for
  until it is answered (a new connection and PING when that connection fails); the
  answer removes the mark, and the next call goes through. Whatever else fails in the
  probe (a client still being built has no slot map) is tried again after a pause; the
  mark ends with its probe: the node answered, left the slot map, or the client closed.
  Marks belong to a process: a forked child has none;
* the default node, which keyless commands go to (TIME, PING, INFO, the key look-up of
  XREAD), is never a marked node while another primary is not: redis-py's refresh of
  the slots sets it back to the first primary, stalled or not.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import (
    ClusterNode,
    ClusterPipeline,
    NodesManager,
    PipelineStrategy,
    RedisCluster,
)
from redis.connection import Connection, SSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

logger = logging.getLogger(__name__)

PROBE_POLL_SECONDS = 0.5  # a probe waiting for its PONG looks this often whether to stop
PROBE_PAUSE_SECONDS = 1.0  # after a probe's connection failed, before the next one
PROBE_RENEW_SECONDS = 30.0  # a PING unanswered this long: a new connection, a new PING
STALL_REFRESH_SECONDS = 1.0  # a client's refreshes of the slots for calls on a stalled node
REFRESH_LOCK = threading.Lock()  # the time of a client's last refresh
# redis-py's own cluster retry: 10 times, jittered 10 ms doubling to 1 s
RETRIES, RETRY_BASE_SECONDS, RETRY_CAP_SECONDS = 10, 0.01, 1.0
# What ties a node's pool to the cluster client that made it (its connect hook, shared
# registries): not for a connection of one's own (a probe's, the wake subscription's).
CLUSTER_BOUND = ("redis_connect_func", "himport_registry",
                 "oss_cluster_maint_notifications_handler")


class NodeStalled(RedisConnectionError):
    """A call refused at once: its node did not answer within the reply timeout, and
    has not answered a probe since."""


def own_connection_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``kwargs`` of a connection to a node (a pool's: address,
    credentials, TLS, timeouts) without what binds them to the cluster client."""
    return {k: v for k, v in kwargs.items() if k not in CLUSTER_BOUND}


class StallLog:
    """What this process logs of a node's stall, whichever of its clients saw it: once
    "did not answer" at its first mark, once "answers again" at the first answer (or
    that the mark was dropped when the node left the slot map)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[str, float] = {}  # name -> when its stall was first seen
        self.quiet: dict[str, tuple[float, float]] = {}  # name -> (first seen, all closed)

    def marked(self, name: str, why: str) -> None:
        with self.lock:
            if name in self.open:
                return
            now = time.monotonic()
            since, closed = self.quiet.pop(name, (now, now - QUIET_SECONDS))
            self.open[name] = since = since if now - closed < QUIET_SECONDS else now
            if since != now:  # its clients closed a moment ago (a worker's checks' client)
                return
            logger.warning("Redis Cluster node %s did not answer (%r): its queues and shards "
                           "are treated as down until it answers a probe", name, why)

    def lifted(self, name: str, how: str) -> None:
        with self.lock:
            since = self.open.pop(name, None)
            if since is None:
                return
            if how == ANSWERED:
                logger.warning("Redis Cluster node %s answers again (after %.1fs)", name,
                               time.monotonic() - since)
            elif how == LEFT:
                logger.warning("Redis Cluster node %s is no longer in the cluster's slot map "
                               "(a failover): its stall mark is dropped (after %.1fs)", name,
                               time.monotonic() - since)
            elif any(s.stalled(name) for s in list(LIVE)):  # a client closed: the stall
                self.open[name] = since  # goes on for another client
            else:
                self.quiet[name] = (since, time.monotonic())


ANSWERED, LEFT, CLOSED = "answered", "left", "closed"
QUIET_SECONDS = 60.0  # a stall whose clients all closed, met again this soon: the same
STALL_LOG = StallLog()
LIVE: weakref.WeakSet[NodeStalls] = weakref.WeakSet()  # for a fork (_after_fork)


class NodeStalls:
    """The nodes ("host:port") of one cluster client that stalled, and their probes.
    ``owns(name)``: whether node ``name`` is still the client's (True while it is being
    built); False drops the mark (the node left the slot map), None ends the probe (the
    client is gone). Marks belong to the process that made them: a forked child has
    none (its parent's probes are not there)."""

    def __init__(self, owns: Callable[[str], bool | None] = lambda name: True) -> None:
        self._owns = owns
        self._reset()
        LIVE.add(self)

    def _reset(self, closed: bool = False) -> None:
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}  # read without the lock: one dict look-up
        self._why: dict[str, str] = {}
        self._closed = threading.Event()
        if closed:
            self._closed.set()

    def stalled(self, name: str) -> bool:
        return name in self._since

    def check(self, name: str) -> None:
        """Raise ``NodeStalled`` when node ``name`` is marked."""
        since = self._since.get(name)
        if since is not None:
            raise NodeStalled("Redis Cluster node %s did not answer (%s) %.1fs ago; calls to "
                              "it fail at once until it answers" % (
                                  name, self._why.get(name, "timeout"), time.monotonic() - since))

    def timed_out(self, name: str, exc: BaseException,
                  connect: Callable[[], Connection]) -> None:
        """Node ``name`` did not answer in time: mark it, and start its probe, which
        ``connect`` gives connections to (each of its own, not guarded)."""
        with self._lock:
            if name in self._since or self._closed.is_set():
                return
            self._why[name] = str(exc)[:200]
            self._since[name] = time.monotonic()
        STALL_LOG.marked(name, str(exc)[:200])
        try:
            threading.Thread(target=self._probe, args=(name, connect),
                             name="delayq-probe %s" % name, daemon=True).start()
        except BaseException:  # no thread (interpreter exiting): no mark without its probe
            self._lift(name, CLOSED)
            raise

    def close(self) -> None:
        """Stop the probes (the client is closed)."""
        self._closed.set()

    def _probe(self, name: str, connect: Callable[[], Connection]) -> None:
        """Until the node answers, leaves the client, or the client is closed: whatever
        fails in between (a connection, the client's state) is tried again after a pause;
        the mark ends with the probe."""
        how = CLOSED
        try:
            while not self._closed.is_set():
                try:
                    how = self._ping(name, connect)
                    if how != "":
                        return
                except Exception as exc:  # noqa: BLE001 - a probe must outlive any failure
                    logger.debug("probe of Redis Cluster node %s: %r", name, exc)
                self._closed.wait(PROBE_PAUSE_SECONDS)
            how = CLOSED
        finally:
            self._lift(name, how)

    def _lift(self, name: str, how: str) -> None:
        with self._lock:
            marked = self._since.pop(name, None) is not None
            self._why.pop(name, None)
        if marked:
            STALL_LOG.lifted(name, how)

    def _gone(self, name: str) -> str:
        """Why the probe of ``name`` ends without an answer ("" while it goes on)."""
        if self._closed.is_set():
            return CLOSED
        owns = self._owns(name)
        return "" if owns else (LEFT if owns is False else CLOSED)

    def _ping(self, name: str, connect: Callable[[], Connection]) -> str:
        """One PING, waited for: ANSWERED (an error answered too: LOADING, NOAUTH), LEFT
        or CLOSED when it is no longer to be probed, "" when the connection failed or went
        unanswered for PROBE_RENEW_SECONDS."""
        gone = self._gone(name)
        if gone:
            return gone
        conn = connect()
        try:
            conn.connect()
            conn.send_command("PING")
            renew = time.monotonic() + PROBE_RENEW_SECONDS
            while time.monotonic() < renew and not (gone := self._gone(name)):
                if conn.can_read(timeout=PROBE_POLL_SECONDS):
                    with contextlib.suppress(ResponseError):
                        conn.read_response(disconnect_on_error=False)
                    return ANSWERED
            return gone
        except (RedisError, OSError):
            return ""
        finally:
            conn.disconnect()


def _after_fork() -> None:
    """In a forked child: no marks (its parent's probes are not there), fresh locks."""
    global STALL_LOG, REFRESH_LOCK  # noqa: PLW0603 - the child's own
    STALL_LOG, REFRESH_LOCK = StallLog(), threading.Lock()
    for stalls in list(LIVE):
        stalls._reset(closed=stalls._closed.is_set())  # noqa: SLF001


os.register_at_fork(after_in_child=_after_fork)


class StallGuard(Connection):
    """The connection of a ``StallAwareCluster``'s pools (``guarded`` makes the class of
    each client, bound to its ``NodeStalls``)."""

    stalls: NodeStalls
    unguarded: type[Connection] = Connection

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        # a probe's connections: the same node and options, no CLIENT SETINFO at connect
        # (its reply would be one more wait), nothing of the cluster client's
        self.probe_kwargs = {**own_connection_kwargs(kwargs), "driver_info": None}

    @property
    def node_name(self) -> str:
        return "%s:%s" % (self.host, self.port)  # redis-py's ClusterNode.name

    def probe_connection(self) -> Connection:
        return self.unguarded(**self.probe_kwargs)

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        self.stalls.check(self.node_name)
        try:
            super().connect_check_health(*args, **kwargs)
        except RedisTimeoutError as exc:  # the connect, or its handshake's reply
            self.stalls.timed_out(self.node_name, exc, self.probe_connection)
            raise

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self.stalls.check(self.node_name)
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except RedisTimeoutError as exc:
            if "timeout" not in kwargs:  # the reply timeout, not a wait the caller chose
                self.stalls.timed_out(self.node_name, exc, self.probe_connection)
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


class StallNodesManager(NodesManager):
    """A client's slot map whose refreshes for a call that met a stalled node
    (``NodeStalled`` being handled) are one a second at most: each such call refreshes
    (a replica promoted meanwhile is followed), none floods the other nodes."""

    refreshed = 0.0  # monotonic time of the last refresh

    def initialize(self, *args: Any, **kwargs: Any) -> None:
        now = time.monotonic()
        if isinstance(sys.exc_info()[1], NodeStalled):
            with REFRESH_LOCK:
                if now - self.refreshed < STALL_REFRESH_SECONDS:
                    return
                self.refreshed = now
        else:
            self.refreshed = now
        super().initialize(*args, **kwargs)


class StallPipelineStrategy(PipelineStrategy):
    """A pipeline (not a MULTI) that met a stalled node fails at once: redis-py's sends
    it again up to 10 times, each after a refresh of the slots."""

    def send_cluster_commands(self, stack: Any, raise_on_error: bool = True,
                              allow_redirections: bool = True) -> Any:
        retries = self._pipe.retry.get_retries()
        while True:
            try:
                return self._send_cluster_commands(  # type: ignore[no-untyped-call]
                    stack, raise_on_error=raise_on_error, allow_redirections=allow_redirections)
            except NodeStalled:
                raise
            except RedisCluster.ERRORS_ALLOW_RETRY:
                if retries <= 0:
                    raise
                retries -= 1


class StallPipeline(ClusterPipeline):
    """The pipelines of a ``StallAwareCluster``: one that met a stalled node refreshes the
    slots (one a second at most), so a MULTI follows a replica promoted meanwhile."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        return self._refreshing(super().execute_command, *args, **kwargs)  # a WATCH: at once

    def execute(self, raise_on_error: bool = True) -> Any:
        return self._refreshing(super().execute, raise_on_error)

    def _refreshing(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except NodeStalled:
            self.nodes_manager.initialize()
            raise


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
        self.stalls = NodeStalls(self._owner(weakref.ref(self)))
        kwargs["connection_class"] = guarded(base or Connection, self.stalls)
        kwargs.setdefault("retry", StallRetry(ExponentialWithJitterBackoff(
            base=RETRY_BASE_SECONDS, cap=RETRY_CAP_SECONDS), retries=RETRIES))
        try:
            super().__init__(url=url, **kwargs)
        except BaseException:
            self.stalls.close()  # no client: no probes
            raise
        manager = self.__dict__.get("nodes_manager")
        if type(manager) is NodesManager:
            manager.__class__ = StallNodesManager  # its refreshes, one a second

    @staticmethod
    def _owner(ref: weakref.ref[StallAwareCluster]) -> Callable[[str], bool | None]:
        def owns(name: str) -> bool | None:
            client: Any = ref()
            if client is None:
                return None  # collected
            manager = client.__dict__.get("nodes_manager")
            if manager is None:
                return True  # still being built: its first refresh met the stall
            return name in manager.nodes_cache
        return owns

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

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        pipe.__class__ = StallPipeline  # redis-py's ClusterPipeline, made a StallPipeline
        if type(pipe._execution_strategy) is PipelineStrategy:
            pipe._execution_strategy = StallPipelineStrategy(pipe)
        return pipe

    def close(self) -> None:
        self.stalls.close()
        super().close()
