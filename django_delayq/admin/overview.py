"""What the queues page and the live dashboard show from Redis, read through the engine
and core APIs only: per queue its counts (``Engine.stats``), next due time, paused state
(``paused_queues``) and limit (``Engine.queue_limit``); the workers of the registry
(``Engine.workers``) with the jobs they run. The callable limits come from
``observe.limit_usage.callable_limits``.

A worker's info entry is JSON any process with access to Redis could have written: each
field is used only when it has the expected type, texts are cut to ``TEXT_CHARS``, and
the templates and the dashboard's script escape everything shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django_delayq.core.queues import known_queues, paused_queues
from django_delayq.observe import holding
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
    """One row per known queue (``QUEUES`` and ``QUEUE_OPTIONS``): one stats script and
    one limit read each."""
    paused = set(paused_queues())
    rows = []
    for queue in known_queues(settings):
        st = engine.stats(queue)
        limit = engine.queue_limit(queue)
        rows.append(QueueRow(
            queue=queue, due_now=st.ready, scheduled=st.scheduled, inflight=st.inflight,
            dead=st.dead, next_due_ms=st.next_due_ms, paused=queue in paused,
            limit="" if limit is None else describe_limit(limit.rate, limit.concurrency)))
    return rows


def _text(value: object) -> str:
    return value[:TEXT_CHARS] if isinstance(value, str) else ""


def _jobs(raw: object, now_ms: float) -> list[RunningJob]:
    return [RunningJob(id=_text(job["id"]), queue=_text(job.get("queue")),
                       callable=_text(job.get("callable")), age_s=age)
            for job, age in holding.running_jobs(raw, now_ms) if job["id"]]


def worker_rows(engine: Engine) -> list[WorkerRow]:
    """Every registered worker, most recent heartbeat first, with its running jobs."""
    now_ms = engine.time_ms()
    rows = []
    for entry in reversed(engine.workers()):
        info, error = holding.parse_info(entry.info)
        malformed = bool(error or entry.info_bytes_unread)  # not JSON, or over the read limit
        info = {} if malformed else info  # then none of its fields is shown
        rows.append(WorkerRow(id=_text(entry.id), host=_text(info.get("host")),
                              pid=holding.integer(info.get("pid")),
                              processes=holding.integer(info.get("processes")),
                              heartbeat_age_s=max(0.0, (now_ms - entry.beat_ms) / 1000),
                              running=holding.count(info, holding.RUNNING_FIELD),
                              prefetched=holding.count(info, holding.PREFETCHED_FIELD),
                              jobs=_jobs(info.get("jobs"), now_ms), malformed=malformed))
    return rows


def held(queues: list[QueueRow], workers: list[WorkerRow]) -> holding.Holding:
    """The queues' jobs in flight, split into running, prefetched and settling."""
    return holding.split(sum(q.inflight for q in queues),
                         ((w.running, w.prefetched) for w in workers))
