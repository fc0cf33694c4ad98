"""Running one claimed job and deciding its outcome (no Redis calls here).

Anything a payload can throw at us ends in an ``Outcome``: a success, a retry after
the job's backoff, or dead (out of attempts, not allowed, not valid JSON). The
worker settles outcomes in Redis in batches.
"""

from __future__ import annotations

import enum
import json
import logging
import time
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import close_old_connections

from django_delayq import execution, payloads
from django_delayq.context import JobContext
from django_delayq.engine import ClaimedJob
from django_delayq.engine import backoff as backoff_mod
from django_delayq.engine.envelope import Envelope
from django_delayq.exceptions import Retry

logger = logging.getLogger(__name__)


class Kind(enum.Enum):
    SUCCESS = "success"
    RETRY = "retry"
    DEAD = "dead"


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
    error: str = ""
    traceback: str = ""
    max_attempts: int = 0


def ms_to_dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _json_or_none(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return None


def _retry_delay(exc: Retry, env: Envelope, default_backoff: Any, attempt: int) -> int:
    if exc.delay is None:
        return backoff_mod.delay_ms(env.backoff if env.backoff is not None else default_backoff,
                                    attempt)
    delay = exc.delay
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)  # type: ignore[arg-type]
    return max(0, int(seconds * 1000))


def run(job: ClaimedJob, *, worker_id: str, default_max_attempts: int,
        default_backoff: Any, manage_connections: bool = True) -> Outcome:
    """Run one attempt. ``manage_connections`` closes stale database connections around
    it (a worker thread); ``django_delayq.testing`` turns that off, since it would close
    the test's connection inside a ``TestCase`` transaction."""
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    common: dict[str, Any] = {"job": job, "started_at": started}
    try:
        env = payloads.of(job)
    except ValueError as exc:
        return Outcome(kind=Kind.DEAD, finished_at=datetime.now(UTC),
                       error="invalid envelope: %s" % exc, **common)
    max_attempts = env.max_attempts or default_max_attempts
    common.update(path=env.path, max_attempts=max_attempts)
    ctx = JobContext(id=job.id, queue=job.queue, attempt=job.token, max_attempts=max_attempts,
                     due_at=ms_to_dt(job.due_ms), worker_id=worker_id)
    if manage_connections:
        close_old_connections()
    try:
        result = execution.run(env.path, env.args, env.kwargs, ctx)
    except PermissionError as exc:
        return _failed(common, Kind.DEAD, "not allowed: %s" % exc, t0)
    except Retry as exc:
        delay = _retry_delay(exc, env, default_backoff, job.token)
        return _failed(common, Kind.RETRY, "retry requested: %s" % exc, t0, job, max_attempts,
                       delay)
    except BaseException as exc:  # noqa: BLE001 - a job must never take the worker down
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            logger.warning("job %s raised %r; treated as a failure", job.id, exc)
        policy = env.backoff if env.backoff is not None else default_backoff
        delay = backoff_mod.delay_ms(policy, job.token)
        return _failed(common, Kind.RETRY, "%s: %s" % (type(exc).__name__, exc), t0, job,
                       max_attempts, delay)
    finally:
        if manage_connections:
            close_old_connections()
    return Outcome(kind=Kind.SUCCESS, finished_at=datetime.now(UTC), result=_json_or_none(result),
                   duration_s=time.perf_counter() - t0, **common)


def timed_out(job: ClaimedJob, *, started_at: datetime, seconds: float,
              default_max_attempts: int, default_backoff: Any) -> Outcome:
    """The outcome of an attempt still running after ``seconds``: a failure, retried
    after the job's backoff (or dead without attempts left). Its thread cannot be
    killed; whatever it returns later is discarded."""
    try:
        env = payloads.of(job)
    except ValueError:
        env = Envelope(path="")
    max_attempts = env.max_attempts or default_max_attempts
    policy = env.backoff if env.backoff is not None else default_backoff
    kind = Kind.RETRY
    delay: int | None = backoff_mod.delay_ms(policy, job.token)
    error = "timed out: still running after %gs (DELAYQ['JOB_TIMEOUT_SECONDS'])" % seconds
    if job.token >= max_attempts:
        kind, delay = Kind.DEAD, None
        error += " (attempt %d of %d: no attempts left)" % (job.token, max_attempts)
    now = datetime.now(UTC)
    return Outcome(job=job, kind=kind, path=env.path, started_at=started_at, finished_at=now,
                   duration_s=(now - started_at).total_seconds(), retry_delay_ms=delay,
                   error=error, max_attempts=max_attempts)


def _failed(common: dict[str, Any], kind: Kind, error: str, t0: float,
            job: ClaimedJob | None = None, max_attempts: int = 0,
            delay: int | None = None) -> Outcome:
    if kind is Kind.RETRY and job is not None and job.token >= max_attempts:
        kind, delay = Kind.DEAD, None
        error += " (attempt %d of %d: no attempts left)" % (job.token, max_attempts)
    return Outcome(kind=kind, finished_at=datetime.now(UTC), error=error[:2000],
                   traceback=traceback.format_exc()[-20000:], retry_delay_ms=delay,
                   duration_s=time.perf_counter() - t0, **common)
