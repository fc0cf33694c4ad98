"""System checks on the Redis server itself: can it evict or forget queue keys?

* ``delayq.W010`` ``maxmemory-policy`` is ``allkeys-*``: when memory is full Redis
  evicts *any* key, including a queue's ``jobs`` hash or ``pending`` set, and jobs
  silently vanish from Redis (the reconciler re-enqueues them from the audit rows, but
  only after the grace period, and a half-evicted queue can strand jobs).
  ``noeviction`` is safe (a full Redis refuses writes: ``schedule()`` keeps the row in
  the outbox). ``volatile-*`` is safe too: it only evicts keys that have a TTL and
  django-delayq never sets one on its keys.
* ``delayq.W011`` Redis could not be reached (never an error: ``manage.py check`` must
  work on a build machine without Redis).
* ``delayq.I010`` no persistence at all (no AOF, no RDB save points): a restart loses
  every job in Redis; the reconciler puts them back from the audit rows. Reported by
  ``manage.py check --deploy`` only (``DEPLOY_ONLY``).

On a Redis Cluster every primary is inspected (each holds some queues) and the
messages name the node.

Skipped with ``DELAYQ["EAGER"]`` (no Redis involved) or invalid settings (``checks.py``
reports those).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import RedisError

from django_delayq.core import conf
from django_delayq.engine.client import make_client
from django_delayq.engine.sharded import ShardedEngine as Engine

if TYPE_CHECKING:
    from django_delayq.engine.server import ServerInfo

logger = logging.getLogger(__name__)

SAFE_POLICIES = ("noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl")
TIMEOUT_SECONDS = 1.0


def _client() -> Any:
    s = conf.get_settings()
    if s.cache_alias:
        return make_client(cache_alias=s.cache_alias)
    return make_client(s.redis_url, socket_connect_timeout=TIMEOUT_SECONDS,
                       socket_timeout=TIMEOUT_SECONDS, health_check_interval=0)


def _settings_usable() -> bool:
    """Valid settings (a bad REDIS_URL or CACHE_ALIAS is not connected through) and not
    EAGER."""
    try:
        return not conf.get_settings().eager
    except ImproperlyConfigured:  # checks.py reports bad settings
        return False


def _inspect_node(info: ServerInfo) -> list[checks.CheckMessage]:
    server = "Redis" if info.node is None else "Redis cluster node %s" % info.node
    found: list[checks.CheckMessage] = []
    memory = info.memory
    policy = str(memory.get("maxmemory_policy", "noeviction"))
    if policy not in SAFE_POLICIES:
        found.append(checks.Warning(
            "%s maxmemory-policy is %r (maxmemory %s bytes): when memory is full Redis "
            "may evict django-delayq's queue keys and jobs vanish from Redis."
            % (server, policy, memory.get("maxmemory", "?")),
            hint="Use a Redis (or database) of its own for django-delayq with "
                 "maxmemory-policy noeviction; volatile-* policies are also safe since our "
                 "keys carry no TTL. See docs/guarantees.md.",
            id="delayq.W010"))
    save = info.save
    if not int(info.persistence.get("aof_enabled", 0)) and save is not None \
            and not save.strip():
        found.append(checks.Info(
            "%s has no persistence (appendonly no, no save points): a restart loses every "
            "job held in it; the reconciler re-enqueues them from the audit rows." % server,
            hint="Set appendonly yes (appendfsync everysec) for at most ~1 s of loss on a "
                 "crash. See docs/guarantees.md.",
            id="delayq.I010"))
    return found


#: Reported by ``manage.py check --deploy`` only: it is about production, and printed by
#: every command that runs the checks (``migrate``, ``runserver``) it was noise in
#: development, where a Redis without persistence is the usual case.
DEPLOY_ONLY = ("delayq.I010",)


@checks.register("delayq")
def check_redis_settings(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """Eviction and reachability: with every command that runs the checks."""
    return [m for m in check_redis() if m.id not in DEPLOY_ONLY]


@checks.register("delayq", deploy=True)
def check_redis_persistence(app_configs: object = None,
                            **kwargs: object) -> list[checks.CheckMessage]:
    """Persistence (``delayq.I010``): with ``manage.py check --deploy``."""
    return [m for m in check_redis() if m.id in DEPLOY_ONLY]


def check_redis(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """Every finding about the Redis server (``W010``, ``W011``, ``I010``)."""
    if not _settings_usable():
        return []
    client = None
    try:
        client = _client()
        # the server, or each primary of a cluster
        return [message for info in Engine(client).server_info() for message in _inspect_node(info)]
    except (RedisError, OSError) as exc:
        return [checks.Warning(
            "cannot reach Redis to check its eviction and persistence settings: %s" % exc,
            hint="Start Redis or set DELAYQ['REDIS_URL']; workers wait for it.",
            id="delayq.W011")]
    finally:
        if client is not None and not conf.get_settings().cache_alias:
            client.close()
