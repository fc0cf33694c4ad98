"""What the queues page and the live dashboard show from Redis, in their own rows: per
queue its counts, next due time, paused state and limit; the workers of the registry with
the jobs they run (all read by ``observe.redis_state``). The callable limits come from
``observe.limit_usage.callable_limits``.

A worker's info entry is JSON any process with access to Redis could have written: each
field is used only when it has the expected type, texts are cut to ``TEXT_CHARS``, and
the templates and the dashboard's script escape everything shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django_delayq.core.queues import known_queues
from django_delayq.observe import holding, redis_state
from django_delayq.observe.limit_usage import describe_limit

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine

TEXT_CHARS = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRow:
    queue: str
    due_now: int
    scheduled: int
    inflight: int
    dead: int
    next_due_ms: int | None
    paused: bool
    limit: str  # "" when the queue has none

    @property
    def next_due(self) -> datetime | None:
        ms = self.next_due_ms
        return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningJob:
    id: str
    queue: str
    callable: str
    age_s: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRow:
    id: str
    host: str
    pid: int | None
    processes: int | None
    heartbeat_age_s: float
    running: int | None = None  # a thread runs them now (observe/holding.py)
    prefetched: int | None = None  # claimed, no thread yet
    jobs: list[RunningJob] = field(default_factory=list)
    malformed: bool = False


def queue_rows(engine: Engine, settings: Settings) -> list[QueueRow]:
    """One row per known queue (``QUEUES`` and ``QUEUE_OPTIONS``)."""
    return [_queue_row(q) for q in redis_state.queues(engine, known_queues(settings))]


def _queue_row(q: redis_state.QueueState) -> QueueRow:
    st, limit = q.stats, q.limit
    return QueueRow(queue=q.queue, due_now=st.ready, scheduled=st.scheduled, inflight=st.inflight,
                    dead=st.dead, next_due_ms=st.next_due_ms, paused=q.paused,
                    limit="" if limit is None else describe_limit(limit.rate, limit.concurrency))


def _text(value: object) -> str:
    return value[:TEXT_CHARS] if isinstance(value, str) else ""


def worker_rows(engine: Engine) -> list[WorkerRow]:
    """Every registered worker, most recent heartbeat first, with its running jobs."""
    return [_worker_row(w) for w in reversed(redis_state.workers(engine))]


def _worker_row(w: redis_state.WorkerState) -> WorkerRow:
    """An info entry not a worker's JSON, or over the read limit, shows none of its fields."""
    jobs = [RunningJob(id=_text(job["id"]), queue=_text(job.get("queue")),
                       callable=_text(job.get("callable")), age_s=age)
            for job, age in w.jobs if job["id"]]
    return WorkerRow(id=_text(w.id), host=_text(w.info.get("host")),
                     pid=holding.integer(w.info.get("pid")), processes=w.processes,
                     heartbeat_age_s=w.heartbeat_age_s, running=w.running,
                     prefetched=w.prefetched, jobs=jobs, malformed=w.error is not None)


def held(queues: list[QueueRow], workers: list[WorkerRow]) -> holding.Holding:
    """The queues' jobs in flight, split into running, prefetched and settling."""
    return holding.split(sum(q.inflight for q in queues),
                         ((w.running, w.prefetched) for w in workers))
