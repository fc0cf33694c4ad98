"""The outcome of one claimed job (``Outcome``: a success, a retry, dead, expired or
deferred), the outcomes decided without running the job (``expired``, ``deferred``,
``crashed``, ``unusable``, ``cancelled_unstarted``), the job status each settlement makes
(``STATUS_OF``) and the text helpers of their error fields. ``runner.py`` runs a job and
decides its outcome; the modules that hold, settle and record outcomes need only this one.
"""

from __future__ import annotations

import enum
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django_delayq.engine.logtext import text
from django_delayq.engine.outcomes import NackOutcome
from django_delayq.exceptions import InvalidRow, LeaseLost, type_path
from django_delayq.models import JobStatus

if TYPE_CHECKING:
    from django_delayq.engine.outcomes import ClaimedJob

INVALID_ROW = type_path(InvalidRow)
LEASE_LOST = type_path(LeaseLost)  # a run lost with its worker
LOST_LEASE = "lease expired: the worker running it died or stopped heartbeating"


class Kind(enum.Enum):
    SUCCESS = "success"
    RETRY = "retry"
    DEAD = "dead"
    EXPIRED = "expired"  # never ran: past its expires_at when claimed (ack-like)
    DEFER = "defer"  # never ran: a callable limit refused the start (attempt given back)


@dataclass(slots=True, kw_only=True)
class Outcome:
    job: ClaimedJob
    kind: Kind
    path: str = ""
    started_at: datetime
    finished_at: datetime
    duration_s: float = 0.0
    retry_delay_ms: int | None = None
    result: Any = None
    error_type: str = ""
    error: str = ""
    traceback: str = ""
    max_attempts: int = 0
    retry_at_ms: int | None = None  # DEFER (or RETRY on a test clock): when it is due again
    callable_limit: str | None = None  # whose slot it holds, freed after settle
    nack_sent: bool = False  # a nack of it got no reply: a later one may be answered twice
    ran: bool = True  # False: decided without running the job (``not_run``)
    row_final: bool = False  # its final row written before Redis settled it (early_rows.py)
    settled_late: bool = False  # failed, its job settled by a stale copy's run: no signal
    expires_at: datetime | None = None  # EXPIRED: the row's expiry, as the worker read it


def row_fields(o: Outcome, status: JobStatus, worker_id: str) -> dict[str, Any]:
    """The row change recording ``o`` as ``status`` by ``worker_id`` (its attempt, its times):
    the settlement's (``Settler._record``) and the early rows' (``early_rows.final_fields``)."""
    return {"status": status, "started_at": o.started_at, "finished_at": o.finished_at,
            "attempts": o.job.attempt, "worker_id": worker_id, "updated_at": o.finished_at}


def ms_to_dt(ms: int) -> datetime:
    """An aware datetime of epoch ``ms``; now for a value no datetime can hold (a due
    time Redis was made to hold)."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, ValueError, OSError):
        return datetime.now(UTC)


def storable(value: object) -> str | None:
    """Text any database takes: lone surrogates become ``\\udXXX``, NUL becomes ``\\x00``."""
    if value is None:
        return None
    out = text(value if type(value) is str else str(value))  # TextChoices: str subclasses
    return out.replace("\x00", "\\x00") if "\x00" in out else out


def error_type(exc: BaseException) -> str:
    """The dotted path of ``exc``'s class, storable (``Job.error_type`` holds 255)."""
    return text(type_path(type(exc)), 255)


def not_run(job: ClaimedJob, kind: Kind, path: str = "", *, error_type: str = "",
            error: str = "", retry_at_ms: int | None = None) -> Outcome:
    """An outcome decided without running the job: it starts and finishes now."""
    now = datetime.now(UTC)
    return Outcome(job=job, kind=kind, path=path, started_at=now, finished_at=now,
                   error_type=error_type, error=error, retry_at_ms=retry_at_ms, ran=False)


def deferred(job: ClaimedJob, path: str, at_ms: int) -> Outcome:
    """A start refused by a callable limit: the job goes back to Redis, due at ``at_ms``."""
    return not_run(job, Kind.DEFER, path, retry_at_ms=at_ms)


def expired(job: ClaimedJob, path: str, expires_ms: int) -> Outcome:
    """A job claimed after its ``expires_at``: this attempt not run, final ``expired``;
    its reason says whether earlier attempts ran (a retry claimed too late)."""
    moment, n = ms_to_dt(expires_ms), job.attempt
    at = moment.isoformat(timespec="milliseconds")
    if n <= 1:
        error = "expired at %s: not started by then, never run" % at
    else:
        ran = "attempt 1" if n == 2 else "attempts 1 to %d" % (n - 1)
        error = "expired at %s: its retry (attempt %d) was not started by then; %s ran" % (
            at, n, ran)
    o = not_run(job, Kind.EXPIRED, path, error=error)
    o.expires_at = moment  # job_expired's
    return o


def crashed(job: ClaimedJob, exc: BaseException, started: datetime | None = None) -> Outcome:
    """The dead outcome of a job whose attempt failed in the worker itself."""
    now = datetime.now(UTC)
    path = job.payload.path if job.payload is not None else ""
    return Outcome(job=job, kind=Kind.DEAD, path=path, started_at=started or now,
                   finished_at=now, error_type=error_type(exc),
                   error=text("worker error: %s" % text(exc), 2000),
                   traceback=text(traceback.format_exc(), 20000))


def unusable(job: ClaimedJob, path: str, reason: str) -> Outcome:
    """The dead outcome of a job whose row cannot be run (``payloads.Broken``)."""
    return not_run(job, Kind.DEAD, text(path, 255), error_type=INVALID_ROW,
                   error=text(reason, 2000))


def cancelled_unstarted(job: ClaimedJob) -> Outcome:
    """The outcome of a claimed job whose cancel was asked before it started: settled as a
    failure without retry, which nack.lua turns into ``cancelled`` (its cancel mark)."""
    return not_run(job, Kind.DEAD, error="cancelled before it started; it did not run")


STATUS_OF: dict[object, JobStatus] = {  # what an ack or a nack made of the job
    Kind.SUCCESS: JobStatus.SUCCEEDED,
    Kind.EXPIRED: JobStatus.EXPIRED,
    NackOutcome.RETRYING: JobStatus.RETRYING,
    NackOutcome.DEAD: JobStatus.DEAD,
    NackOutcome.CANCELLED: JobStatus.CANCELLED,
}
