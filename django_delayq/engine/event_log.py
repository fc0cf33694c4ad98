"""Appending to the event stream: ``events_add.lua`` in bounded calls.

One call carries at most ``scripts.MAX_EVENTS`` events and ``scripts.MAX_EVENT_ARGS``
arguments, so a burst of thousands of events is a few short script calls, never one
long one that would hold Redis. Up to ``PIPELINED`` calls are written together and their
replies read in order: one round trip for a flush of a few hundred events (Redis reads a
client's input 16 KB at a time, a call or two, and serves the others in between). The
buffering, the flusher thread and what an event holds are the caller's
(``core/events.py``).

**Streams.** The events of a sharded queue go to a stream of their job's shard,
``{prefix:queue#i}:events``, on that shard's node; every other event to the prefix's
stream ``{prefix}:events``. On a Redis Cluster the stream work is then spread like the
queue's own work (one stream on one node took half of a 3-shard queue's Redis CPU).
Each stream is capped near ``maxlen``. Readers (``Engine.last_events``,
``Engine.read_events``) merge the streams by entry id, which each node draws from its
clock; ``read_events`` takes a cursor per stream, as two streams' ids are in no one order.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from redis import Redis
from redis.exceptions import ResponseError

from django_delayq.engine import scripts
from django_delayq.engine.replies import grouped
from django_delayq.engine.resp import command, own_connection

logger = logging.getLogger(__name__)
_F = TypeVar("_F", bound=Mapping[str, str])


def calls(maxlen: int, batch: Sequence[Mapping[str, str]]
          ) -> Iterator[tuple[list[Any], int, int]]:
    """(arguments, events of ``batch`` covered, events sent) of each ``events_add`` call.
    An event too large for one call is covered but not sent (WARNING)."""
    args: list[Any] = [maxlen]
    events = covered = 0
    for fields in batch:
        size = 1 + 2 * len(fields)
        if events and (events == scripts.MAX_EVENTS
                       or len(args) + size > scripts.MAX_EVENT_ARGS):
            yield args, covered, events
            args, events, covered = [maxlen], 0, 0
        covered += 1
        if 1 + size > scripts.MAX_EVENT_ARGS:
            logger.warning("event stream: an event of %d fields is over the bound of one "
                           "call; dropped", len(fields))
            continue
        args.append(len(fields))
        for kv in fields.items():
            args += kv
        events += 1
    if covered:
        yield args, covered, events


class EventLog:
    """The stream at ``key`` capped near ``maxlen`` entries (``XADD MAXLEN ~``), written
    through ``client`` (any redis-py client; ``Engine.event_log`` gives the engine's).
    ``route(fields)``, when given, names the stream of each event instead (a sharded
    queue's events go to a stream on their shard's node: ``Engine.event_stream_of``)."""

    def __init__(self, client: object, key: str, maxlen: int,
                 route: Callable[[Mapping[str, str]], str] | None = None) -> None:
        self.client = client
        self.key = key
        self.maxlen = maxlen
        self.route = route

    def order(self, batch: Sequence[_F]) -> list[_F]:
        """``batch`` grouped by stream (each stream's events in their order), the order
        ``append`` writes them in."""
        if self.route is None:
            return list(batch)
        return [fields for group in grouped(batch, self.route).values() for fields in group]

    def append(self, batch: Sequence[Mapping[str, str]]) -> Iterator[tuple[int, int, int]]:
        """Write ``batch`` (as ``order`` returns it) in order, in bounded calls; yields
        (events covered, sent, written by Redis) after each call's reply, so that a caller
        stopped by an error knows how far it got. Redis writes fewer than sent only into a
        damaged stream."""
        script = scripts.load("events_add")
        for key, run in itertools.groupby(batch, self.route or (lambda _fields: self.key)):
            keys = script.keys_of(None, events=key)
            todo = list(calls(self.maxlen, list(run)))
            for i in range(0, len(todo), PIPELINED):
                yield from self._calls(script, keys, todo[i:i + PIPELINED])

    def _calls(self, script: scripts.Script, keys: tuple[str, ...],
               todo: list[tuple[list[Any], int, int]]) -> Iterator[tuple[int, int, int]]:
        """``todo``'s calls. On a plain client they are encoded here (``resp.command``:
        the calls' arguments repeat the same names, queue and callable, each distinct one
        encoded once for all of them, at a third of redis-py's cost) and written together
        on a connection of its pool, then their replies read in order: one round trip, and
        one wait of this thread, for up to ``PIPELINED`` calls (each round trip let go
        of the interpreter and had to win it back from the job threads). Redis still
        runs each call on its own, between other clients' commands. A call answered
        with an error (the script not loaded, a key of the wrong type) is made again
        with the script's usual call, which handles it."""
        if type(self.client) is not Redis:  # a cluster (its node by key), a wrapper
            for args, covered, sent in todo:
                yield covered, sent, int(script(self.client, keys, args))
            return
        head: tuple[str | int, ...] = ("EVALSHA", script.sha, len(keys), *keys)
        data = []
        seen: dict[str | int, bytes] = {}  # the parts encoded so far, for all the calls
        for args, _covered, _sent in todo:
            script.check(args)
            data.append(command(*head, *args, seen=seen))
        # from the first call answered with an error on: (call, written or None: again)
        later: list[tuple[tuple[list[Any], int, int], int | None]] = []
        pool = self.client.connection_pool
        conn = own_connection(pool)
        try:
            conn.send_packed_command(data)
            for call in todo:
                try:
                    written: int | None = int(conn.read_response())
                except ResponseError:  # the script did not run: NOSCRIPT, a wrong type
                    written = None
                if written is None or later:  # yielded in order, after the one made again
                    later.append((call, written))
                else:
                    yield call[1], call[2], written
        except BaseException:
            conn.disconnect()  # replies may still be on their way: never read as another's
            raise
        finally:
            pool.release(conn)
        for (args, covered, sent), written in later:
            yield covered, sent, int(script(self.client, keys, args)) if written is None \
                else written


PIPELINED = 16  # events_add calls written before their replies are read

