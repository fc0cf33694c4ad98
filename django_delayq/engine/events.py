"""Appending to the event stream: ``events_add.lua`` in bounded calls.

One call carries at most ``scripts.MAX_EVENTS`` events and ``scripts.MAX_EVENT_ARGS``
arguments, so a burst of thousands of events is a few short script calls, never one
long one that would hold Redis. The buffering, the flusher thread and what an event
holds are the caller's (``core/events.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django_delayq.engine import scripts

logger = logging.getLogger(__name__)


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
    through ``client`` (any redis-py client; ``Engine.event_log`` gives the engine's)."""

    def __init__(self, client: Any, key: str, maxlen: int) -> None:
        self.client = client
        self.key = key
        self.maxlen = maxlen

    def append(self, batch: Sequence[Mapping[str, str]]) -> Iterator[tuple[int, int, int]]:
        """Write ``batch`` in order, one bounded call at a time; yields (events covered,
        sent, written by Redis) after each call, so that a caller stopped by an error
        knows how far it got. Redis writes fewer than sent only into a damaged stream."""
        script = scripts.load("events_add")
        for args, covered, sent in calls(self.maxlen, batch):
            written = int(script(self.client, (self.key,), args))
            yield covered, sent, written
