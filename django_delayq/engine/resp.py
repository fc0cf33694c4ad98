"""The Redis protocol (RESP) of the commands the engine writes on a connection itself,
past redis-py's encoder: the ack stream's acks and start marks (``engine/acks.py``) and
the event log's pipelined calls (``engine/event_log.py``). One encoder for both, and one
way to take the connection they are written on (``own_connection``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from redis import ConnectionPool
    from redis.connection import Connection


def bulk(parts: Iterable[str | int], seen: dict[str | int, bytes] | None = None) -> bytes:
    """``parts`` as Redis bulk strings, without the array's header (a command's parts, or
    the first or last of them). With ``seen`` (a dict the caller keeps for one command or
    batch) each distinct part is encoded once: an event log call repeats its field names,
    queue and callable hundreds of times (a third of redis-py's cost); a start mark's
    three parts are all different, and skip the look-ups."""
    if seen is None:
        return b"".join(map(_encoded, parts))
    return b"".join(seen.get(part) or seen.setdefault(part, _encoded(part)) for part in parts)


def _encoded(part: str | int) -> bytes:
    raw = part.encode() if isinstance(part, str) else b"%d" % part
    return b"$%d\r\n%s\r\n" % (len(raw), raw)


def command(*parts: str | int, count: int = 0,
            seen: dict[str | int, bytes] | None = None) -> bytes:
    """``parts`` as one command of the Redis protocol; ``count``: the number of parts of
    the whole command when these are its first ones (the rest follow as ``bulk``);
    ``seen``: as for ``bulk`` (parts repeat, within the command or across a batch)."""
    return b"*%d\r\n%s" % (count or len(parts), bulk(parts, seen))


def own_connection(pool: ConnectionPool) -> Connection:
    """A connection of ``pool`` for the caller alone, until it releases it (redis-py 5.3
    dropped the command name argument; older versions need it)."""
    try:
        return pool.get_connection()
    except TypeError:
        return pool.get_connection("EVALSHA")
