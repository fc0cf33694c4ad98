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

Both surfaces read a worker's info entry here too (``parse_info``: JSON any process with
access to Redis could have written, each field used only when it has the expected type),
its running jobs (``running_jobs``) and their progress from their rows (``progress_of``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django_delayq.core import stored
from django_delayq.models import Job

#: A worker's registry info field for each figure.
RUNNING_FIELD = "running"
PREFETCHED_FIELD = "waiting"
JOBS_SHOWN = 50  # of one worker's info (a worker lists at most 50)
MAX_PROGRESS_IDS = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class Holding:
    in_flight: int
    running: int
    prefetched: int
    settling: int


def integer(value: object) -> int | None:
    """``value`` when it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def count(info: Mapping[str, Any], field: str) -> int | None:
    """``info[field]`` when it is a count (an int, not a bool, not negative), else None."""
    value = integer(info.get(field))
    return value if value is not None and value >= 0 else None


def parse_info(raw: str | None) -> tuple[dict[str, Any], str | None]:
    """A worker's info entry as a dict, or ``({}, why)`` when it is not a JSON object."""
    if raw is None:
        return {}, None
    try:
        info = json.loads(raw)
    except (ValueError, RecursionError):
        return {}, "not JSON"
    if not isinstance(info, dict):
        return {}, "not a JSON object but %s" % type(info).__name__
    return info, None


def running_jobs(raw: object, now_ms: float) -> Iterator[tuple[dict[str, Any], float | None]]:
    """The entries of a worker's ``jobs`` info that are objects with a text ``id`` (at
    most ``JOBS_SHOWN``), each with its age in seconds (None without a ``started_ms``)."""
    for item in raw[:JOBS_SHOWN] if isinstance(raw, list) else []:
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            started = item.get("started_ms")
            if isinstance(started, (int, float)) and not isinstance(started, bool):
                yield item, max(0.0, (now_ms - started) / 1000)
            else:
                yield item, None


def progress_of(ids: Iterable[str]) -> dict[str, Any]:
    """The progress of each job of ``ids`` (at most ``MAX_PROGRESS_IDS``) that has one,
    from its row in one query: any row however deep (``core.stored``), as its text then."""
    wanted = list(dict.fromkeys(ids))[:MAX_PROGRESS_IDS]
    rows = Job.objects.filter(pk__in=wanted).values_list("id", stored.as_text("progress"))
    found = {pk: stored.parse(text) for pk, text in rows} if wanted else {}
    return {pk: v.text if isinstance(v, stored.Raw) else v for pk, v in found.items()}


def split(in_flight: int, workers: Iterable[tuple[int | None, int | None]]) -> Holding:
    """The split of ``in flight`` (summed over the queues shown) by the workers'
    ``(running, prefetched)`` counts (``None`` for a count a worker's info lacks)."""
    pairs = list(workers)
    running, prefetched = sum(r or 0 for r, _ in pairs), sum(w or 0 for _, w in pairs)
    return Holding(in_flight=in_flight, running=running, prefetched=prefetched,
                   settling=max(0, in_flight - running - prefetched))
