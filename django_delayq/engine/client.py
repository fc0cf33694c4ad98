"""redis-py clients from a URL (or a django-redis cache alias), for an ``Engine``.

``redis+cluster://host:7000,host:7001/`` (``rediss+cluster://`` with TLS) gives a
``redis.cluster.RedisCluster`` (``StallAwareCluster``: a node that stalls costs one reply
timeout, engine/stalls.py): every listed host is a startup node (any one that answers
tells the client the whole cluster); credentials and query options apply to every node.
See docs/cluster.md.

``redis+sentinel://[user:password@]s1:26379,s2:26379/<service>/<db>`` (``rediss+sentinel://``
with TLS to the master) gives ``Sentinel(...).master_for(service)``: every connection asks
the sentinels for the current master, so after a failover the next command (or the wake
listener's next subscription) reaches the promoted replica; a connection to a demoted
master fails with READONLY and is dropped. The credentials are the master's;
``?sentinel_password=...`` (and ``sentinel_username``) authenticate to the sentinels, and
the ``socket_*`` options apply to both.

Every client gets timeouts (connect 1 s, reply 5 s: a silent partition must not hang a
worker, nor a ``schedule()`` call, for long), TCP keepalive and a health check unless the
caller says otherwise (the URL's query options win). No Django here: a cache
alias is resolved by django-redis itself, imported only when one is asked for; the
settings checks read the URL schemes and their problems (``is_cluster_url``,
``url_problem``) from here too.

A URL whose scheme does not match the server is ``WrongRedisMode``
(``engine/server_mode.py``), a setting to fix rather than an outage: a plain client's
MOVED or ASK reply (its server is a cluster node), a cluster client whose node has no
cluster mode (``cluster_client``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.exceptions import RedisClusterException, ResponseError
from redis.sentinel import Sentinel, SentinelManagedConnection, SentinelManagedSSLConnection

from django_delayq.engine.server_mode import PLAIN_CONNECTIONS, WrongRedisMode
from django_delayq.engine.stalls import StallAwareCluster

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
SENTINEL_SCHEMES = ("redis+sentinel://", "rediss+sentinel://")


def is_cluster_url(url: str | None) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``)."""
    return bool(url) and str(url).startswith(CLUSTER_SCHEMES)


def is_sentinel_url(url: str | None) -> bool:
    """Whether ``url`` names a master through Redis Sentinel (``redis+sentinel://``,
    ``rediss+sentinel://``)."""
    return bool(url) and str(url).startswith(SENTINEL_SCHEMES)


def sentinel_parts(url: str) -> tuple[str, int, list[tuple[str, int]]]:
    """``redis+sentinel://:pw@h1:26379,h2:26379/mymaster/2?...`` -> (``mymaster``, 2,
    [(h1, 26379), (h2, 26379)]). A host without a port gets 26379; no database: 0.
    ValueError names what is wrong (no sentinel, no service name, a bad port or db)."""
    parts = urlsplit(url)
    hosts = [h.strip() for h in parts.netloc.rpartition("@")[2].split(",") if h.strip()]
    if not hosts:
        raise ValueError("no sentinel host:port")
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if not segments or len(segments) > 2:
        raise ValueError("the path must be /<service name> or /<service name>/<db>")
    db = segments[1] if len(segments) == 2 else "0"
    if not db.isdigit():
        raise ValueError("the database must be a number, not %r" % db)
    return segments[0], int(db), [host_port(h, 26379) for h in hosts]


def sentinel_query(url: str) -> dict[str, str]:
    """The query options of a Sentinel URL (the last value of each)."""
    return {k: v[-1] for k, v in parse_qs(urlsplit(url).query).items()}


def host_port(netloc: str, default_port: int) -> tuple[str, int]:
    """``h:1`` -> (h, 1); ``h`` -> (h, default_port); ``[::1]:1`` -> (::1, 1).
    ValueError for a port that is not a number in 1..65535."""
    host, colon, port = netloc.rpartition(":")
    if not colon or host.endswith(":"):  # no port, or a bare IPv6 address
        return netloc.strip("[]"), default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("bad port in %r" % netloc)
    return host.strip("[]"), int(port)


def url_problem(url: str) -> str | None:
    """What is wrong with a URL ``make_client`` takes, or None: what redis-py would raise
    on first use (a port that is not a number in 1..65535, which 0 is not either: it would
    be dropped for 6379; a query option it cannot read), a database that is not a number
    (it would use 0) or is negative; a Sentinel URL's own (``sentinel_parts``). Names no
    password."""
    try:
        parts = urlsplit(url)
        if "@" in url.partition("://")[2] and "@" not in parts.netloc:
            return ("its user or password holds '/', '?' or '#' (the URL's host part ends "
                    "there): percent-encode them (%2F, %3F, %23)")
        if is_cluster_url(url) and not parts.netloc.rpartition("@")[2].strip(", "):
            raise ValueError("a Redis Cluster URL must name at least one node, e.g. "
                             "'redis+cluster://host1:7000,host2:7000/'")
        if is_sentinel_url(url):
            sentinel_parts(url)
            url = "redis://localhost?" + parts.query  # the master's options
        elif parts.scheme != "unix":  # a socket's path is no host, its db in the query
            for host in parts.netloc.rpartition("@")[2].split(","):
                host_port(host.strip(), 6379)
            db = unquote(parts.path).strip("/").strip()  # redis-py: 0 for one int() refuses
            if db and "db" not in parse_qs(parts.query) and not (db.isascii() and db.isdigit()):
                raise ValueError("the database must be a number, not %r" % db)
        node = split_cluster_url(url)[0] if is_cluster_url(url) else url
        if parse_url(node).get("db", 0) < 0:
            raise ValueError("the database must be a number >= 0")
        unknown_option(node)
    except ValueError as exc:
        return str(exc)
    return None


def unknown_option(url: str) -> None:
    """ValueError naming a query option of ``url`` (one node's, no Sentinel's own) that
    redis-py's connection takes no keyword for (its ``TypeError`` at the first command), or
    whose value the connection refuses. The connection is built, not connected; the error
    names the option (and a refused value: never a password's)."""
    query = [(k, v) for k, v in parse_qsl(urlsplit(url).query) if k not in SENTINEL_ONLY]
    try:  # (urlunsplit would drop a socket path's "//")
        redis.ConnectionPool.from_url(url.partition("?")[0] + "?" + urlencode(query)
                                      ).make_connection()
    except TypeError as exc:
        name = re.search(r"keyword argument '([^']*)'", str(exc))
        raise ValueError("unknown query option %r: redis-py's connection takes no such "
                         "keyword" % (name.group(1) if name else str(exc))) from None
    except redis.RedisError as exc:  # a value it refuses: "protocol must be either 2 or 3"
        raise ValueError(str(exc)) from None


def masked(url: str) -> str:
    """``url`` with its password, and any ``*password=`` query option, shown as ``***``
    (one ``urlsplit`` refuses: all between ``://`` and its last ``@``)."""
    head, sep, rest = url.partition("://")
    try:
        parts = urlsplit(url)
        if "@" in rest and "@" not in parts.netloc:  # a '/', '?' or '#' in the password
            raise ValueError(url)
    except ValueError:
        return head + sep + ("***@" + rest.rpartition("@")[2] if "@" in rest else rest)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    user, colon, _password = userinfo.partition(":")
    query = re.sub(r"(^|&)([^=&]*password=)[^&]*", r"\1\2***", parts.query, flags=re.I)
    if (colon, query) == ("", parts.query):
        return url
    return urlunsplit((parts.scheme, user + (colon and ":***") + at + hosts, parts.path,
                       query, parts.fragment))


# A client of one Redis server (or a Sentinel's primary), or of a Redis Cluster.
RedisClient = redis.Redis | RedisCluster

DEFAULT_URL = "redis://localhost:6379/0"
# A node that does not answer must not hold a caller for long: schedule() into it keeps
# its row in the outbox instead. Every script and MULTI is bounded to milliseconds, so a
# reply that takes seconds means the server (or the path to it) is stalled.
CONNECT_TIMEOUT_SECONDS = 1.0
SOCKET_TIMEOUT_SECONDS = 5.0


def make_client(url: str | None = None, cache_alias: str | None = None, **options: Any) -> Any:
    """A redis-py client for ``url`` (redis://, rediss://, unix://, redis+cluster://,
    rediss+cluster://, redis+sentinel://, rediss+sentinel://) or a cache alias."""
    if cache_alias:
        return cache_client(cache_alias)
    url = url or DEFAULT_URL
    options.setdefault("health_check_interval", 30)
    options.setdefault("socket_connect_timeout", CONNECT_TIMEOUT_SECONDS)
    options.setdefault("socket_timeout", SOCKET_TIMEOUT_SECONDS)
    if not url.startswith("unix://"):
        options.setdefault("socket_keepalive", True)
    if is_cluster_url(url):
        return cluster_client(url, **options)
    if is_sentinel_url(url):
        return sentinel_client(url, **options)
    if plain := PLAIN_CONNECTIONS.get(urlsplit(url).scheme):  # MOVED and ASK: WrongRedisMode
        options.setdefault("connection_class", plain)
    return redis.Redis.from_url(url, **options)


def cache_client(alias: str) -> Any:
    """The raw client of the django-redis cache ``alias`` (shares its connection pool)."""
    from django_redis import get_redis_connection  # lazy: it imports Django; CACHE_ALIAS only

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
    return base, [host_port(h, 6379) for h in others]


SENTINEL_ONLY = ("sentinel_password", "sentinel_username")


class _NoReplicasAsksAgain:
    """A connection to the master through Sentinel that answers ``NOREPLICAS`` as redis-py
    answers ``READONLY``: it drops itself (the next connection asks the sentinels for the
    master) and raises ``ConnectionError``, an outage to retry. ``min-replicas-to-write``
    gives that reply on an old master the sentinels have replaced but not yet demoted
    (a planned failover, a partition); before, every command of a pooled connection to it
    was refused until the demotion (measured: ~16 s). On a master still in place (its
    replica lagging) the next connection reaches it again."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)  # type: ignore[misc]
        except ResponseError as exc:
            if not str(exc).startswith("NOREPLICAS") \
                    or not self.connection_pool.is_master:  # type: ignore[attr-defined]
                raise
            self.disconnect()  # type: ignore[attr-defined]
            raise redis.ConnectionError(
                "the master refuses writes (%s): asking the sentinels again" % exc) from exc


class _SentinelConnection(_NoReplicasAsksAgain, SentinelManagedConnection):
    pass


class _SentinelSSLConnection(_NoReplicasAsksAgain, SentinelManagedSSLConnection):
    pass


def sentinel_client(url: str, **options: Any) -> Any:
    """The master of the service a ``redis+sentinel://`` URL names, found through its
    sentinels at every (re)connection (``redis.sentinel.SentinelConnectionPool``)."""
    service, db, sentinels = sentinel_parts(url)
    parts, query = urlsplit(url), sentinel_query(url)
    master_query = urlencode({k: v for k, v in query.items() if k not in SENTINEL_ONLY})
    userinfo = parts.netloc.rpartition("@")[0]
    scheme = parts.scheme.removesuffix("+sentinel")
    master = parse_url(urlunsplit((scheme, (userinfo + "@" if userinfo else "") + "localhost",
                                   "/%d" % db, master_query, "")))
    for key in ("host", "port", "path"):
        master.pop(key, None)
    if master.pop("connection_class", None) is not None:  # rediss: TLS to the master
        master["ssl"] = True
    kwargs = {**options, **master}
    own = {k: v for k, v in kwargs.items() if k.startswith("socket_")}
    own.update({k.removeprefix("sentinel_"): query[k] for k in SENTINEL_ONLY if k in query})
    if kwargs.get("ssl"):  # rediss+sentinel: TLS to the sentinels too (their password, the
        own.update({k: v for k, v in kwargs.items() if k.startswith("ssl")})  # master's address)
    kwargs["connection_class"] = _SentinelSSLConnection if kwargs.get("ssl") \
        else _SentinelConnection
    return Sentinel(sentinels, sentinel_kwargs=own).master_for(service, **kwargs)


def cluster_client(url: str, **options: Any) -> Any:
    """A ``RedisCluster`` on which a node that stalls costs one reply timeout, then fails
    at once until it answers (``engine/stalls.py``). It must reach a node to start: when
    none answers, the error is a ``redis.ConnectionError`` like any outage (``schedule()``
    keeps the row in the outbox, ``manage.py check`` warns) rather than a
    ``RedisClusterException``; when a node answers that it runs without cluster mode, it
    is ``WrongRedisMode``."""
    base, others = split_cluster_url(url)
    startup = [ClusterNode(host, port) for host, port in others]
    try:
        return StallAwareCluster(url=base, startup_nodes=startup, **options)
    except RedisClusterException as exc:
        hosts = urlsplit(url).netloc.rpartition("@")[2]  # never the password
        if NOT_A_CLUSTER in str(exc):  # redis-py's words when CLUSTER SLOTS is refused
            raise WrongRedisMode(
                "DELAYQ['REDIS_URL'] names a Redis Cluster (redis+cluster://) but the Redis "
                "server at %s is not a cluster node (it refuses CLUSTER SLOTS): use a redis:// "
                "URL for a single server, e.g. 'redis://%s/0'" % (hosts, hosts.split(",")[0])
            ) from exc
        raise redis.ConnectionError("Redis Cluster at %s: %s" % (hosts, exc)) from exc


NOT_A_CLUSTER = "Cluster mode is not enabled"


def answers(url: str) -> bool:
    """Whether a Redis server answers PING at ``url`` now (False while it cannot be
    reached: not started yet, its unix socket not there yet)."""
    client = sentinel_client(url) if is_sentinel_url(url) else redis.Redis.from_url(url)
    try:
        return bool(client.ping())
    except (redis.ConnectionError, FileNotFoundError):
        return False
    finally:
        client.close()
