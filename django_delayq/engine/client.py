"""redis-py clients from a URL (or a django-redis cache alias), for an ``Engine``.

``redis+cluster://host:7000,host:7001/`` (``rediss+cluster://`` with TLS) gives a
``redis.cluster.RedisCluster``: every listed host is a startup node (any one that
answers tells the client the whole cluster); credentials and query options apply to
every node. See docs/cluster.md.

Every client gets timeouts (a silent partition must not hang a worker forever), TCP
keepalive and a health check unless the caller says otherwise. No Django here: a cache
alias is resolved by django-redis itself, imported only when one is asked for.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.exceptions import RedisClusterException

from django_delayq.engine.urls import is_cluster_url

DEFAULT_URL = "redis://localhost:6379/0"


def make_client(url: str | None = None, cache_alias: str | None = None, **options: Any) -> Any:
    """A redis-py client for ``url`` (redis://, rediss://, unix://, redis+cluster://,
    rediss+cluster://) or a cache alias."""
    if cache_alias:
        return cache_client(cache_alias)
    url = url or DEFAULT_URL
    options.setdefault("health_check_interval", 30)
    options.setdefault("socket_connect_timeout", 5)
    options.setdefault("socket_timeout", 10)  # a silent partition must not hang forever
    if not url.startswith("unix://"):
        options.setdefault("socket_keepalive", True)
    if is_cluster_url(url):
        return cluster_client(url, **options)
    return redis.Redis.from_url(url, **options)


def cache_client(alias: str) -> Any:
    """The raw client of the django-redis cache ``alias`` (shares its connection pool)."""
    from django_redis import get_redis_connection

    return get_redis_connection(alias)


def split_cluster_url(url: str) -> tuple[str, list[tuple[str, int]]]:
    """``rediss+cluster://u:p@h1:7000,h2:7001/?opt=1`` -> (``rediss://u:p@h1:7000/?opt=1``,
    [(h2, 7001)]): the first node's URL carries the options, the others are extra
    startup nodes."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    first, *others = [h.strip() for h in hosts.split(",") if h.strip()] or ["localhost"]
    scheme = parts.scheme.removesuffix("+cluster")
    base = urlunsplit((scheme, userinfo + at + first, parts.path, parts.query, ""))
    return base, [_host_port(h) for h in others]


def _host_port(netloc: str) -> tuple[str, int]:
    host, colon, port = netloc.rpartition(":")
    if not colon or host.endswith(":"):  # no port, or a bare IPv6 address
        return netloc.strip("[]"), 6379
    return host.strip("[]"), int(port)


def cluster_client(url: str, **options: Any) -> Any:
    """A ``RedisCluster``. It must reach a node to start: when none answers, the error is
    a ``redis.ConnectionError`` like any outage (``schedule()`` keeps the row in the
    outbox, ``manage.py check`` warns) rather than a ``RedisClusterException``."""
    from redis.cluster import ClusterNode, RedisCluster

    base, others = split_cluster_url(url)
    startup = [ClusterNode(host, port) for host, port in others]
    try:
        return RedisCluster(url=base, startup_nodes=startup, **options)
    except RedisClusterException as exc:
        hosts = urlsplit(url).netloc.rpartition("@")[2]  # never the password
        raise redis.ConnectionError("Redis Cluster at %s: %s" % (hosts, exc)) from exc


def answers(url: str) -> bool:
    """Whether a Redis server answers PING at ``url`` now (False while it cannot be
    reached: not started yet, its unix socket not there yet)."""
    client = redis.Redis.from_url(url)
    try:
        return bool(client.ping())
    except (redis.ConnectionError, FileNotFoundError):
        return False
    finally:
        client.close()
