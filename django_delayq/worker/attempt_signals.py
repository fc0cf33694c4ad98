"""The lifecycle signals of an attempt, as a worker sends them (``settle.py``); ``base``:
``job_id``, ``queue``, ``callable_path``. Eager runs (``testing.run_eager``) send them
through these. A job claimed after its expiry sends ``job_expired`` instead (it never
starts: ``signal_expired``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_delayq import signals
from django_delayq.core.validation import json_value
from django_delayq.models import JobStatus
from django_delayq.worker.outcome import ms_to_dt

if TYPE_CHECKING:
    from datetime import datetime

    from django_delayq.worker.outcome import Outcome


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
    """``job_retrying`` (``retry_at``), ``job_dead``, or a running job's ``job_cancelled``
    (a lease recovery's, ``worker_id=""``, also carries ``worker_id``, ``error``,
    ``error_type`` and ``started_at``, as its ``job_dead`` would: docs/signals.md); none for
    a failed run whose job ended as an earlier run settled it (``succeeded``)."""
    if status is JobStatus.RETRYING:
        signals.send(signals.job_retrying, attempt=attempt, worker_id=worker_id, error=error,
                     error_type=error_type, started_at=started_at, retry_at=retry_at, **base)
    elif status is JobStatus.DEAD:
        signals.send(signals.job_dead, attempt=attempt, worker_id=worker_id, error=error,
                     error_type=error_type, started_at=started_at, **base)
    elif status is JobStatus.CANCELLED:
        lost = {} if worker_id else {"worker_id": "", "error": error, "error_type": error_type,
                                     "started_at": started_at}  # a lease recovery's
        signals.send(signals.job_cancelled, running=True, **lost, **base)


def signal_expired(base: dict[str, Any], o: Outcome, worker_id: str) -> None:
    """``job_expired`` of a job ``o`` found expired at its claim (``outcome.expired``): the
    attempts that ran before the one claimed, the claimed delivery's due time in Redis
    and the row's expiry (to the millisecond: as the worker read it)."""
    signals.send(signals.job_expired, attempts=o.job.attempt - 1, worker_id=worker_id,
                 due_at=ms_to_dt(o.job.due_ms), expires_at=o.expires_at, **base)
