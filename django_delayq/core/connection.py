"""One ``Engine`` per process, from the settings: ``DELAYQ["CACHE_ALIAS"]`` (a
django-redis cache) or ``DELAYQ["REDIS_URL"]``.

The clients themselves are made by the engine (``engine/client.py``: URL schemes,
Redis Cluster, timeouts); this module holds the Django part: which settings, and
forgetting the engine when they change.
"""

from __future__ import annotations

import threading

from django.core.signals import setting_changed
from django.dispatch import receiver

from django_delayq.core.conf import get_settings
from django_delayq.engine.client import make_client, split_cluster_url  # noqa: F401
from django_delayq.engine.sharded import ShardedEngine as Engine

_lock = threading.Lock()
_engine: Engine | None = None


def get_engine() -> Engine:
    global _engine  # noqa: PLW0603 - one per process, set under _lock
    if _engine is None:
        with _lock:
            if _engine is None:
                s = get_settings()
                _engine = Engine(make_client(s.redis_url, s.cache_alias), prefix=s.prefix,
                                 shards=s.queue_shards)
    return _engine


def set_engine(engine: Engine | None) -> None:
    """Use ``engine`` in this process (test helpers); ``None`` goes back to the settings."""
    global _engine  # noqa: PLW0603 - one per process, set under _lock
    with _lock:
        _engine = engine


def reset() -> None:
    set_engine(None)


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: object) -> None:
    if setting in ("DELAYQ", "CACHES"):
        reset()
