"""One ``Engine`` per process, from a django-redis cache alias or a URL.

``redis+cluster://host:7000,host:7001/`` (``rediss+cluster://`` with TLS) gives a
``redis.cluster.RedisCluster``: every listed host is a startup node (any one that
answers tells the client the whole cluster); credentials and query options apply to
every node. See docs/cluster.md.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.core.signals import setting_changed
from django.dispatch import receiver

from django_delayq.engine import Engine
from django_delayq.engine.urls import is_cluster_url

_lock = threading.Lock()
_engine: Engine | None = None

DEFAULT_URL = "redis://localhost:6379/0"
def make_client(url: str | None = None, cache_alias: str | None = None, **options: Any) -> Any:
    """A redis-py client for ``url`` (redis://, rediss://, unix://, redis+cluster://,
    rediss+cluster://) or a cache alias."""
    if cache_alias:
        from django_redis import get_redis_connection

        return get_redis_connection(cache_alias)
    import redis

    url = url or DEFAULT_URL
    options.setdefault("health_check_interval", 30)
    options.setdefault("socket_connect_timeout", 5)
    options.setdefault("socket_timeout", 10)  # a silent partition must not hang forever
    if not url.startswith("unix://"):
        options.setdefault("socket_keepalive", True)
    if is_cluster_url(url):
        return cluster_client(url, **options)
    return redis.Redis.from_url(url, **options)


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
    from redis import ConnectionError as RedisConnectionError
    from redis.cluster import ClusterNode, RedisCluster
    from redis.exceptions import RedisClusterException

    base, others = split_cluster_url(url)
    startup = [ClusterNode(host, port) for host, port in others]
    try:
        return RedisCluster(url=base, startup_nodes=startup, **options)
    except RedisClusterException as exc:
        hosts = urlsplit(url).netloc.rpartition("@")[2]  # never the password
        raise RedisConnectionError("Redis Cluster at %s: %s" % (hosts, exc)) from exc


def get_engine() -> Engine:
    global _engine
    if _engine is None:
        with _lock:
            if _engine is None:
                from django_delayq.core.conf import get_settings

                s = get_settings()
                _engine = Engine(make_client(s.redis_url, s.cache_alias), prefix=s.prefix)
    return _engine


def set_engine(engine: Engine | None) -> None:
    """Use ``engine`` in this process (test helpers); ``None`` goes back to the settings."""
    global _engine
    with _lock:
        _engine = engine


def reset() -> None:
    global _engine
    with _lock:
        _engine = None


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("DELAYQ", "CACHES"):
        reset()
