"""What Redis holds of the queues and the workers, read in one place for every surface
that shows it (the admin's queues page and live dashboard, ``manage.py delayq_status``):
plain data, each surface keeping its own field names and texts.

* ``queues(engine, names)``: per queue its counts and next due time (``Engine.stats``,
  one atomic script each), whether it is paused (``Engine.paused``, one round trip for
  all) and its limit (``Engine.queue_limit``: what the workers wrote).
* ``workers(engine)``: the workers of the registry (``Engine.workers``, oldest heartbeat
  first), each with its heartbeat's age on the Redis clock, its info entry and the jobs
  it runs (``holding``: each job's entry as the worker wrote it, any JSON value in its
  fields). An entry that is not a worker's JSON, or that is over the registry's read
  limit, has its ``error`` and an empty ``info``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_delayq.observe import holding

if TYPE_CHECKING:
    from django_delayq.engine import Engine
    from django_delayq.engine.outcomes import QueueLimit, QueueStats


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueState:
    queue: str
    stats: QueueStats
    paused: bool
    limit: QueueLimit | None  # None when the queue has none


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerState:
    id: str
    heartbeat_age_s: float
    info: dict[str, Any]  # {} when the entry is absent or ``error`` says why it was not used
    error: str | None
    processes: int | None  # each figure None when the info has no such count
    running: int | None  # jobs a thread runs now (observe/holding.py)
    prefetched: int | None  # claimed, no thread yet
    jobs: list[tuple[dict[str, Any], float | None]]  # running: its entry, its age in seconds


def queues(engine: Engine, names: Sequence[str]) -> list[QueueState]:
    paused = set(engine.paused(names))
    return [QueueState(queue=queue, stats=engine.stats(queue), paused=queue in paused,
                       limit=engine.queue_limit(queue)) for queue in names]


def workers(engine: Engine) -> list[WorkerState]:
    now_ms = engine.time_ms()
    out = []
    for entry in engine.workers():
        info, error = holding.parse_info(entry.info)  # absent or not read: {}
        if entry.info_bytes_unread:
            error = "%d bytes, over the registry's read limit: not read" % (
                entry.info_bytes_unread)
        out.append(WorkerState(
            id=entry.id, heartbeat_age_s=max(0.0, (now_ms - entry.beat_ms) / 1000), info=info,
            error=error, processes=holding.integer(info.get("processes")),
            running=holding.count(info, holding.RUNNING_FIELD),
            prefetched=holding.count(info, holding.PREFETCHED_FIELD),
            jobs=list(holding.running_jobs(info.get("jobs"), now_ms))))
    return out
