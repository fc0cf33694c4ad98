"""Redis URL schemes the engine understands (no Django: settings checks use these too)."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

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


def sentinel_url_problem(url: str) -> str | None:
    """What is wrong with a Sentinel URL, or None."""
    try:
        sentinel_parts(url)
    except ValueError as exc:
        return str(exc)
    return None
