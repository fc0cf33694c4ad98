"""One ``Engine`` per process, from a django-redis cache alias or a URL."""

from __future__ import annotations

import threading
from typing import Any

from django_delayq.engine import Engine

_lock = threading.Lock()
_engine: Engine | None = None

DEFAULT_URL = "redis://localhost:6379/0"


def make_client(url: str | None = None, cache_alias: str | None = None, **options: Any) -> Any:
    """A redis-py client for ``url`` (redis://, rediss://, unix://) or a cache alias."""
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
    return redis.Redis.from_url(url, **options)


def get_engine() -> Engine:
    global _engine
    if _engine is None:
        with _lock:
            if _engine is None:
                from django_delayq.conf import get_settings

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
