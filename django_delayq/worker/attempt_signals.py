"""The lifecycle signals of an attempt, as a worker sends them (``settle.py``); ``base``:
``job_id``, ``queue``, ``callable_path``. Eager runs (``testing.run_eager``) send them
through these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_delayq import signals
from django_delayq.core.validation import json_value
from django_delayq.models import JobStatus

if TYPE_CHECKING:
    from datetime import datetime


def signal_started(base: dict[str, Any], attempt: int, worker_id: str, due_at: datetime,
                   started_at: datetime) -> None:
    signals.send(signals.job_started, attempt=attempt, worker_id=worker_id, due_at=due_at,
                 started_at=started_at, **base)


def signal_succeeded(base: dict[str, Any], attempt: int, worker_id: str, result: object,
                     duration: float | None) -> None:
    if signals.wanted(signals.job_succeeded):  # result: the JSON value its row stores
        signals.send(signals.job_succeeded, attempt=attempt, worker_id=worker_id,
                     result=json_value(result), duration=duration, **base)


def signal_failed(base: dict[str, Any], status: JobStatus, attempt: int, worker_id: str, *,
                  error: str, error_type: str, started_at: datetime | None,
                  retry_at: datetime | None = None) -> None:
    """``job_retrying`` (``retry_at``), ``job_dead``, or a running job's ``job_cancelled``;
    none for a failed run whose job ended as an earlier run settled it (``succeeded``)."""
    if status is JobStatus.RETRYING:
        signals.send(signals.job_retrying, attempt=attempt, worker_id=worker_id, error=error,
                     error_type=error_type, started_at=started_at, retry_at=retry_at, **base)
    elif status is JobStatus.DEAD:
        signals.send(signals.job_dead, attempt=attempt, worker_id=worker_id, error=error,
                     error_type=error_type, started_at=started_at, **base)
    elif status is JobStatus.CANCELLED:
        signals.send(signals.job_cancelled, running=True, **base)
