"""The job being run by this thread, for job functions that want it."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class JobContext:
    id: str
    queue: str
    attempt: int
    max_attempts: int
    due_at: datetime
    worker_id: str
    # the attempt's start: its row's started_at and job_started's (None: not known)
    started_at: datetime | None = None


_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar("delayq_job",
                                                                            default=None)


def current_job() -> JobContext | None:
    """The running job's context inside a job function, else ``None``."""
    return _current.get()
