"""What the workers hold, split the same way wherever it is shown (the admin's queues page
and live dashboard, ``manage.py delayq_status``).

A queue's ``in flight`` count (its ``inflight`` set in Redis: every job under a lease) is
the sum of three figures, each with one name:

* **running**: a thread (or child process) runs it now;
* **prefetched**: claimed by a worker, no thread has started it yet;
* **settling**: finished, its acknowledgement not yet recorded in Redis.

Each worker publishes ``running`` and ``prefetched`` (its registry info's ``running``
and ``waiting`` fields) at every heartbeat; ``settling`` is what is left of ``in flight``
once both are taken away. The workers' figures are as of their last heartbeat, the
``in flight`` count as of now: when the two disagree (a worker's info is older than a
claim), ``settling`` is 0, never negative.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: A worker's registry info field for each figure.
RUNNING_FIELD = "running"
PREFETCHED_FIELD = "waiting"


@dataclass(frozen=True, slots=True, kw_only=True)
class Holding:
    in_flight: int
    running: int
    prefetched: int
    settling: int


def count(info: Mapping[str, Any], field: str) -> int | None:
    """``info[field]`` when it is a count (an int, not a bool, not negative), else None."""
    value = info.get(field)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def split(in_flight: int, workers: Iterable[tuple[int | None, int | None]]) -> Holding:
    """The split of ``in flight`` (summed over the queues shown) by the workers'
    ``(running, prefetched)`` counts (``None`` for a count a worker's info lacks)."""
    running = prefetched = 0
    for runs, waits in workers:
        running += runs or 0
        prefetched += waits or 0
    return Holding(in_flight=in_flight, running=running, prefetched=prefetched,
                   settling=max(0, in_flight - running - prefetched))
