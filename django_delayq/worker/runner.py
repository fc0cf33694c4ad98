"""Running one claimed job and deciding its outcome (no Redis calls here).

Anything a payload can throw at us ends in an ``Outcome``: a success, a retry after
the job's backoff, or dead (out of attempts, not allowed, an unusable row, an exception
its ``retry_on`` does not list). Two outcomes never run the function (``gates.py``
decides them): *expired* (not started before the row's ``expires_at``) and *deferred*
(refused by a callable limit: back to Redis, no attempt charged). An atomic job's call
and the write of its success share one transaction (``atomic.py``). ``run``
never raises: a retry delay that cannot be computed (a backoff the row should never have
held, ``Retry(delay=...)`` with nonsense) ends the job dead with the reason, and any
other failure of ours becomes a dead outcome of that job alone. The worker settles
outcomes in Redis in batches.

A failed attempt is recorded as data, three fields: ``error_type`` (the dotted path of
the exception class, ``builtins.ValueError``), ``error`` (its message) and
``traceback``. A failure the worker decides on its own has a declared type of
``django_delayq.exceptions`` (``JobTimeout``, ``InvalidRow``) and a message of ours.
Error texts are made storable (lone surrogates escaped) before they reach the audit row.

**Execution** (``Execution``): the job threads (``delayq-exec-N``), each running one
claimed job at a time.

A thread takes the next job from the handover (``handover.py``: by priority, due time,
claim order), makes sure its cancel was not asked since its row was read
(``held_cancels.py``: read again when that read is older than ``FRESH_S``; a cancelled
job ends there, never started), marks it started in the ledger (``ledger.py``), asks the
start gate whether it may start (``gates.StartGate``: expired? refused by a callable
limit?), has its start recorded (``Settler.started``: the start mark, the row
``running``), runs it (``run``) and hands its outcome to the settlement
(``settlement.py``), which acks it at once on this thread when it may. No failure of ours
stops a thread: the job ends dead with it.

Time limits (``Settings.timeout_for``): the main loop calls ``expire_overdue``, which fails
the attempts running past theirs; their threads stay busy until the function returns.
An attempt that ends past its limit before the main loop looked is timed out all the same.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import threading
import time
import traceback
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections, connections, transaction

from django_delayq.core import payloads, progress, registry, validation
from django_delayq.core.conf import get_settings
from django_delayq.core.context import JobContext
from django_delayq.engine import backoff as backoff_mod
from django_delayq.engine.envelope import Envelope
from django_delayq.engine.logtext import logged, shown, text
from django_delayq.exceptions import (
    JobTimeout,
    Refused,
    ResultTooLarge,
    Retry,
    type_path,
)
from django_delayq.worker import atomic, gates
from django_delayq.worker.ledger import Ledger, key_of, start_margin
from django_delayq.worker.outcome import (
    INVALID_ROW,
    LEASE_LOST,
    Kind,
    Outcome,
    crashed,
    error_type,
    ms_to_dt,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.engine.outcomes import ClaimedJob
    from django_delayq.worker.claiming import Claiming
    from django_delayq.worker.settlement import Settlement
    from django_delayq.worker.tracking import RunningJob

logger = logging.getLogger(__name__)

JOB_TIMEOUT = type_path(JobTimeout)
NOT_ALLOWED = "not allowed: "  # a refused job's error (docs/guarantees.md)
RESULT_TOO_LARGE = type_path(ResultTooLarge)


def stored_result(value: object) -> tuple[object, int]:
    """``(value, its size)``: the result as the database can store it as JSON (``None``
    when it cannot: circular, too deep for the encoder, not JSON, a lone surrogate, NUL)
    and the UTF-8 bytes of its JSON (0 for ``None``)."""
    if value is None or value is True or value is False or (
            type(value) is int and validation.too_long_int(value) is None):
        return value, 0 if value is None else len(str(value).lower())  # most results
    try:
        encoded = json.dumps(value, allow_nan=False, ensure_ascii=False)
        size = validation.utf8_size(encoded)  # UnicodeEncodeError: a lone surrogate
    except Exception:  # noqa: BLE001 - circular, too deep, not JSON: no result kept
        return None, 0
    if "\\u0000" in encoded and validation.holds_nul(value):  # PostgreSQL's jsonb refuses
        return None, 0  # a NUL (a backslash before "u0000" is text: kept)
    return value, size


def too_large(size: int, limit: int) -> str:
    """The error of a result of ``size`` bytes over the limit (``ResultTooLarge``)."""
    return ("result is %d bytes as JSON, over DELAYQ['MAX_PAYLOAD_BYTES'] = %d: not kept, "
            "and not retried (it would be as large again); return an id of data stored "
            "elsewhere instead" % (size, limit))


def _succeeded(common: dict[str, Any], value: object, t0: float) -> Outcome:
    """The success of an attempt that returned ``value``; dead (``ResultTooLarge``, not
    retried) when its JSON is over ``MAX_PAYLOAD_BYTES``."""
    kept, size = stored_result(value)
    limit = get_settings().max_payload_bytes
    if size > limit:
        return _ended(common, t0, Kind.DEAD, error_type=RESULT_TOO_LARGE,
                      error=too_large(size, limit))
    return _ended(common, t0, Kind.SUCCESS, result=kept)


def _ended(common: dict[str, Any], t0: float, kind: Kind, **fields: Any) -> Outcome:
    """The outcome of the attempt of ``common`` begun at ``t0`` (``time.perf_counter``),
    ending now: ``kind``, with ``fields`` (over those of ``common``)."""
    return Outcome(kind=kind, finished_at=datetime.now(UTC), duration_s=time.perf_counter() - t0,
                   **{**common, **fields})


def retried(kind: type[BaseException], retry_on: tuple[str, ...] | None) -> bool:
    """Whether an exception of class ``kind`` may be retried: ``retry_on`` ``None``
    retries any; otherwise the class or one of its bases must be listed."""
    if retry_on is None:
        return True
    return any(type_path(base) in retry_on for base in kind.__mro__
               if isinstance(base, type) and issubclass(base, BaseException))


def _retry_delay(exc: Retry | None, env: Envelope, default_backoff: backoff_mod.Policy,
                 attempt: int) -> int:
    """Milliseconds before the retry; ``ValueError`` (or another error) when the delay
    cannot be computed. ``Retry(delay=...)`` beyond ``validation.MAX_DELAY_SECONDS`` is
    capped there."""
    if exc is None or exc.delay is None:
        policy = env.backoff if env.backoff is not None else default_backoff
        return backoff_mod.delay_ms(policy, attempt)
    delay = exc.delay
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, (int, float)) and not isinstance(delay, bool):
        seconds = float(min(delay, validation.MAX_DELAY_SECONDS))
    else:
        raise ValueError("Retry(delay=%s) is not seconds or a timedelta" % text(repr(delay), 80))
    if math.isnan(seconds):
        raise ValueError("Retry(delay=nan) is not a delay")
    return int(max(0.0, min(seconds, validation.MAX_DELAY_SECONDS)) * 1000)


def run(job: ClaimedJob, *, worker_id: str, default_max_attempts: int,
        default_backoff: backoff_mod.Policy, manage_connections: bool = True,
        soft_limit: tuple[float, float] | None = None,
        started_at: datetime | None = None) -> Outcome:
    """Run one attempt; never raises. ``manage_connections`` closes stale database
    connections around it (a worker thread); ``django_delayq.testing`` turns that off,
    since it would close the test's connection inside a ``TestCase`` transaction.
    ``soft_limit`` (a worker without a supervisor: when its ledger started the attempt,
    ``time.monotonic()``, and its time limit, as the main loop counts them): an attempt
    that ends past that limit is timed out, however late the main loop looked (under a
    supervisor, one that ends before its kill keeps its outcome). ``started_at``: the
    attempt's start instant (``Settler.started``'s), which its outcome and its
    ``JobContext`` carry; now when not given."""
    started = started_at or datetime.now(UTC)
    since, limit = soft_limit or (0.0, None)  # thread mode: from the ledger's start (monotonic)
    try:
        t0 = time.perf_counter()
        common: dict[str, Any] = {"job": job, "started_at": started}
        try:
            env = payloads.of(job)
        except ValueError as exc:
            return Outcome(kind=Kind.DEAD, finished_at=datetime.now(UTC),
                           error_type=INVALID_ROW, error="invalid row: %s" % text(exc), **common)
        max_attempts = env.max_attempts or default_max_attempts
        common.update(path=env.path, max_attempts=max_attempts)
        ctx = JobContext(id=job.id, queue=job.queue, attempt=job.attempt,
                         max_attempts=max_attempts, due_at=ms_to_dt(job.due_ms),
                         worker_id=worker_id, started_at=started)
        if manage_connections and time.monotonic() - getattr(
                _local, "closed", -FRESH_S) >= FRESH_S:
            close_old_connections()  # else this thread's last attempt just closed them
        try:
            if env.atomic:
                return _atomic(common, env, ctx, t0, worker_id)
            result = call_job(env.path, env.args, env.kwargs, ctx, registry.resolve_here)
        except BaseException as exc:  # noqa: BLE001 - a job must never take the worker down
            return _past(limit, time.monotonic() - since, common) or _raised(
                exc, common, t0, env, default_backoff)
        finally:
            if manage_connections:
                close_old_connections()
                _local.closed = time.monotonic()
        return _past(limit, time.monotonic() - since, common) or _succeeded(common, result, t0)
    except Exception as exc:  # noqa: BLE001 - a bug of ours, or input nobody foresaw
        logger.exception("job %s: could not run or settle its attempt; it ends dead", shown(job.id))
        return crashed(job, exc, started)


# -- calling the function: sync or ``async def``, with the job context set ------------

_local = threading.local()
# The stale database connections are closed around each attempt (Django's request
# hooks do the same around a request); before an attempt that follows one of the same
# thread by less than this, the check after that one stands for it.
FRESH_S = 1.0


def call_job(path: str, args: list[Any], kwargs: dict[str, Any], ctx: JobContext,
             resolve: Callable[[str], Callable[..., Any]] = registry.resolve) -> Any:
    """Resolve ``path`` through the allow-list (the worker's: ``resolve_here``, whose
    ``Unresolved`` ``_raised`` retries) and call it inside the job context
    (``current_job()``, ``report_progress()``: its last value is written before this
    returns, so before the worker settles the attempt); an ``async def`` runs on this
    thread's event loop."""
    fn = resolve(path)
    with progress.running(ctx):
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
            if loop is None or loop.is_closed():
                loop = _local.loop = asyncio.new_event_loop()
            return loop.run_until_complete(result)
        return result


def _past(limit: float | None, elapsed: float, common: dict[str, Any]) -> Outcome | None:
    """The outcome of an attempt that ended past its time limit (``elapsed`` seconds after
    it started): timed out, whatever it returned or raised, however late the main loop
    (busy) looked for it (the outcome it recorded first stands: this one comes late and is
    dropped)."""
    if limit is None or elapsed <= limit:
        return None
    return timed_out(common["job"], common["started_at"], limit, common["max_attempts"])


def _raised(exc: BaseException, common: dict[str, Any], t0: float, env: Envelope,
            default_backoff: backoff_mod.Policy) -> Outcome:
    """The outcome of an attempt whose function raised ``exc`` (the job's: called in the
    handler of the job's exception, never inside one of ours). For ``Unresolved`` (this
    worker cannot resolve the function) it is its cause, retried whatever ``retry_on``
    says: a worker running a newer deploy may have the function."""
    if isinstance(exc, registry.Unresolved) and exc.__cause__ is not None:
        exc, env = exc.__cause__, replace(env, retry_on=None)  # about this worker's code
    kind, error, delay = Kind.DEAD, text(exc), None
    if isinstance(exc, Refused):  # not allowed (registry.NotAllowed, a refused URL)
        error = error if error.startswith(NOT_ALLOWED) else NOT_ALLOWED + error
    else:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            logger.warning("job %s raised %s; treated as a failure", shown(common["job"].id),
                           shown(repr(exc)))
        asked = exc if isinstance(exc, Retry) else None  # retried whatever retry_on says
        kind, error, delay = _decide(error, type(exc), asked, env, common["job"],
                                     common["max_attempts"], default_backoff)
    trace = "".join(traceback.format_exception(exc))
    return _ended(common, t0, kind, error_type=error_type(exc), error=text(error, 2000),
                  retry_delay_ms=delay, traceback=text(trace)[-20000:])


def _atomic(common: dict[str, Any], env: Envelope, ctx: JobContext, t0: float,
            worker_id: str) -> Outcome:
    """An attempt of an atomic job (``atomic.py``): the function and the write of its
    success in one transaction. A success a delivery committed before is settled without
    calling the function: the row is read inside the transaction, once it holds its
    turn (on SQLite the write lock: a read before it would be stale once another
    delivery's commit ends the wait). An exception of the function rolls back and
    reaches ``run``; a result too large, or an end past the attempt's time limit, rolls
    back too."""
    job: ClaimedJob = common["job"]
    limit = get_settings().timeout_for(job.queue, env.timeout)
    try:
        with atomic.transaction_of() as using:
            done = atomic.committed(job.id, using)
            if done is None:
                outcome = _succeeded(common, call_job(env.path, env.args, env.kwargs, ctx,
                                                      registry.resolve_here), t0)
                late = _past(limit, time.perf_counter() - t0, common)
                if late is not None or outcome.kind is not Kind.SUCCESS:
                    # rolled back: past its limit (the worker failed this attempt already),
                    # or its result is too large (dead, nothing kept)
                    transaction.set_rollback(True, using=using)
                    return late or outcome
                atomic.commit(using, job.id, job.attempt, worker_id=worker_id,
                              started_at=common["started_at"], finished_at=outcome.finished_at,
                              result=outcome.result)
                return outcome
    except atomic.NotOurs as refused:
        done = refused.committed
        if done is None:  # a later attempt holds its row: rolled back, and its outcome
            # settled like a lost lease's (Redis refuses it unless this lease is still valid)
            return _ended(common, t0, Kind.RETRY, retry_delay_ms=0, error_type=LEASE_LOST,
                          error="attempt %d lost its lease before its commit: rolled back"
                                % job.attempt)
        logger.warning("job %s: attempt %d committed its success while attempt %d ran: "
                       "attempt %d rolled back", shown(job.id), done.attempt, job.attempt,
                       job.attempt)
        return _ended(common, t0, Kind.SUCCESS, result=done.result)
    logger.info("job %s: attempt %d committed its success; settled without running it again",
                shown(job.id), done.attempt)
    return _ended(common, t0, Kind.SUCCESS, result=done.result, ran=False)  # not a run


def _decide(error: str, failure: type[BaseException], asked: Retry | None, env: Envelope,
            job: ClaimedJob, max_attempts: int, default_backoff: backoff_mod.Policy
            ) -> tuple[Kind, str, int | None]:
    """(kind, error, retry delay) of a failed attempt (its exception's class: ``failure``):
    retried after its delay, or dead when ``retry_on`` does not list its type (unless the
    job ``asked`` for the retry: ``Retry``), no delay can be computed, or it was the last
    attempt (the row shows attempts n of n)."""
    if asked is None and not retried(failure, env.retry_on):
        return Kind.DEAD, error + " (not retried: %s is not in retry_on)" % text(
            type_path(failure), 255), None
    try:
        delay = _retry_delay(asked, env, default_backoff, job.attempt)
    except Exception as why:  # noqa: BLE001 - a bad backoff ends this job, not the thread
        return Kind.DEAD, error + " (not retried: cannot compute the retry delay: %s)" % (
            text(why)), None
    if job.attempt >= max_attempts:
        return Kind.DEAD, error, None
    return Kind.RETRY, error, delay


def timed_out(job: ClaimedJob, started_at: datetime, seconds: float,
              max_attempts: int | None = None) -> Outcome:
    """The outcome of an attempt still running after ``seconds`` (its time limit): a
    failure of type ``JobTimeout``, retried after the job's backoff (dead without attempts
    left, or when its ``retry_on`` does not list ``JobTimeout``; the defaults are the
    settings'; ``max_attempts``: the attempt's own, when its caller worked it out). Its
    thread cannot be killed; whatever it returns later is discarded."""
    settings = get_settings()
    try:
        env = payloads.of(job)
    except ValueError:
        env = Envelope(path="")
    max_attempts = max_attempts or env.max_attempts or settings.default_max_attempts
    kind, error, delay = _decide("timed out: still running after %gs (its time limit)" % seconds,
                                 JobTimeout, None, env, job, max_attempts, settings.default_backoff)
    now = datetime.now(UTC)
    return Outcome(job=job, kind=kind, path=env.path, started_at=started_at, finished_at=now,
                   duration_s=(now - started_at).total_seconds(), retry_delay_ms=delay,
                   error_type=JOB_TIMEOUT, error=error, max_attempts=max_attempts)


class Execution:
    """Who runs: ``concurrency`` job threads (``start``; ``stop`` ends them once the jobs
    handed over before it have run). It builds what a start checks: the start gate
    (``gate``: expiry on claiming's server clock, callable limits; the ledger, the
    settlement and the heartbeat release or renew its slots) and the held jobs' cancels
    (``cancels``: the job threads check them, the main loop sweeps them)."""

    def __init__(self, engine: Engine, settings: Settings, ledger: Ledger, claiming: Claiming,
                 settlement: Settlement, *, worker_id: str, concurrency: int) -> None:
        self.settings = settings
        self.gate = gates.StartGate(engine, settings, claiming.clock.now_ms)
        from django_delayq.worker.held_cancels import HeldCancels  # lazy: a 13-module chain
        self.cancels = HeldCancels(ledger)  # cancels asked while a job waited for a thread
        self.ledger, self.handover, self.settlement = ledger, claiming.handover, settlement
        self.worker_id, self.concurrency = worker_id, concurrency
        self.margin = start_margin(settings.lease_ms)  # lease a job must have left to start
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self.concurrency):
            t = threading.Thread(target=self._run, name="delayq-exec-%d" % i, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self.handover.stop_threads(len(self._threads))
        for t in self._threads:
            t.join(timeout=5)

    def _run(self) -> None:
        while True:
            job = self.handover.next_job()
            if job is None:
                connections.close_all()  # this thread's connections, not the caller's
                return
            env = job.payload  # its time limit: the job's, its queue's or the global one
            limit = self.settings.timeout_for(job.queue, None if env is None else env.timeout)
            read = self.cancels.check(job)  # cancelled since its row was read? (then ended)
            if not (running := self.ledger.start(job, limit)):
                continue  # released during drain, stale (its lease lost), or cancelled
            admitted: gates.Admission | None = None
            try:  # its cancels unread (the database down) or its lease maybe gone: deferred;
                admitted = self.gate.admit(job) if read and self._leased(job) else (  # else
                    gates.Admission(ended=self.gate.retry_later(job)))  # expired? limited?
                outcome = admitted.ended or self._attempt(job, admitted, running)
            except BaseException as exc:  # noqa: BLE001 - the job ends dead; the thread lives
                # on, its jobs settled (SystemExit too: a project's log handler raising it)
                logged(logger.exception, "job %s: the worker failed around its attempt",
                       shown(job.id))
                outcome = crashed(job, exc)
                if admitted is not None:  # its callable-limit slot, freed once settled
                    outcome.callable_limit = admitted.callable_limit
            self.ledger.finish(key_of(job), outcome)
            self.settlement.finished()  # acked now, on this thread

    def _leased(self, job: ClaimedJob) -> bool:
        """Whether ``job``'s lease has time left to start it (asked before its limits: a
        job handed back uses no grant): as this worker last extended it, else renewed."""
        return self.ledger.lease_left(job) >= self.margin or self.settlement.settler.renewed(job)

    def _attempt(self, job: ClaimedJob, admitted: gates.Admission,
                 running: RunningJob) -> Outcome:
        self.settlement.wait_recorded(job.id)  # a quick retry sees its previous attempt
        if at := self.settlement.settler.started(job, admitted.callable_limit is not None,
                                                 running.started_at):  # one instant
            outcome = run(job, worker_id=self.worker_id,
                          default_max_attempts=self.settings.default_max_attempts,
                          default_backoff=self.settings.default_backoff,
                          soft_limit=None if self.ledger.link is not None or running.limit
                          is None else (running.started_mono, running.limit), started_at=at)
        else:  # no start mark (Redis unreachable): not run, its row untouched
            outcome = self.gate.retry_later(job)
        outcome.callable_limit = admitted.callable_limit  # its slot, freed once settled
        return outcome

    # -- time limits (the main loop's) ---------------------------------------------

    def expire_overdue(self) -> None:
        """Fail attempts running past their time limit (``Settings.timeout_for``): stop
        heartbeating them (their lease is not extended again), settle them as failures."""
        overdue = self.ledger.time_out_limits(time.monotonic(), timed_out)
        for job in overdue:
            logger.warning("job %s: still running past its time limit; failing this attempt "
                           "(its thread stays busy until the function returns)", shown(job.id))

    def wait_ms(self, wait_ms: float) -> float:
        """``wait_ms``, or less: until the earliest time limit of a running attempt (the main
        loop fails an overdue attempt on time)."""
        if (limit := self.ledger.next_limit()) is not None:
            wait_ms = min(wait_ms, (limit - time.monotonic()) * 1000 + 1)
        return wait_ms
