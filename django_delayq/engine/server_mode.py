"""Whether a Redis server answers in the mode its URL names: a Redis Cluster node reached
through a plain ``redis://`` URL (its MOVED and ASK replies, ``INFO cluster``), or a
server without cluster mode behind ``redis+cluster://`` (``engine/client.py``'s
``cluster_client``), or a Sentinel reached through a plain URL (``INFO server``'s
``redis_mode:sentinel``: it answers PING but no GET). Each is ``WrongRedisMode``: a
setting to fix, not an outage to wait out (``manage.py check``'s ``delayq.E034``;
``delayq_worker`` exits 2)."""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import AskError, MovedError, ResponseError

__all__ = ["PLAIN_CONNECTIONS", "WrongRedisMode", "check_server_mode"]


class WrongRedisMode(ResponseError):
    """The URL's scheme and the server disagree: a Redis Cluster node reached through a
    ``redis://`` (``rediss://``, ``unix://``) URL, or a server without cluster mode behind
    ``redis+cluster://``. A setting to fix, not an outage: ``manage.py check`` reports it
    (``delayq.E034``) and ``delayq_worker`` exits 2 instead of waiting. A ``ResponseError``:
    a pipeline reads its other replies and names the command, as for any error reply."""


def cluster_node_error(server: str, reply: str) -> WrongRedisMode:
    """The error for a Redis Cluster node at ``server`` reached by a plain client."""
    return WrongRedisMode(
        "the Redis server at %s is a Redis Cluster node (%s): set DELAYQ['REDIS_URL'] to a "
        "redis+cluster:// URL, e.g. 'redis+cluster://%s/'" % (server, reply, server))


class _ClusterNodeReplies:
    """A plain client's connection that reports a MOVED or ASK reply (only a Redis Cluster
    node sends one) as ``WrongRedisMode`` naming the cause, not as a bare
    ``6041 host:port``."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)  # type: ignore[misc]
        except AskError as exc:
            reply = "%s %s" % ("MOVED" if isinstance(exc, MovedError) else "ASK", exc)
            raise cluster_node_error(self._server(), reply) from exc

    def _server(self) -> str:
        path = getattr(self, "path", None)
        return str(path) if path else "%s:%s" % (getattr(self, "host", "?"),
                                                 getattr(self, "port", "?"))


class PlainConnection(_ClusterNodeReplies, redis.Connection):
    pass


class PlainSSLConnection(_ClusterNodeReplies, redis.SSLConnection):
    pass


class PlainUnixConnection(_ClusterNodeReplies, redis.UnixDomainSocketConnection):
    pass


PLAIN_CONNECTIONS: dict[str, type[redis.Connection] | type[redis.UnixDomainSocketConnection]] = {
    "redis": PlainConnection, "rediss": PlainSSLConnection, "unix": PlainUnixConnection}


def sentinel_error(server: str) -> WrongRedisMode:
    """The error for a Sentinel at ``server`` reached by a plain client."""
    return WrongRedisMode(
        "the Redis server at %s is a Sentinel (INFO server: redis_mode:sentinel), which "
        "holds no keys: set DELAYQ['REDIS_URL'] to a redis+sentinel:// URL naming the "
        "service it monitors, e.g. 'redis+sentinel://%s/mymaster/0'" % (server, server))


def check_server_mode(client: Any) -> None:
    """``WrongRedisMode`` when a plain client's server is a Redis Cluster node (``INFO
    cluster`` says ``cluster_enabled:1``) or a Sentinel (``INFO server`` says
    ``redis_mode:sentinel``); a cluster client's nodes were asked when it was made
    (``cluster_client``). An INFO that is refused (ACL) says nothing."""
    if isinstance(client, RedisCluster):
        return
    kwargs = client.connection_pool.connection_kwargs
    server = kwargs.get("path") or "%s:%s" % (kwargs.get("host"), kwargs.get("port"))
    try:
        enabled = client.info("cluster").get("cluster_enabled", 0)
        mode = "" if str(enabled) == "1" else client.info("server").get("redis_mode", "")
    except ResponseError:
        return
    if str(enabled) == "1":
        raise cluster_node_error(server, "INFO cluster: cluster_enabled:1")
    if mode == "sentinel":
        raise sentinel_error(server)
