"""Helpers for users' own test suites.

* ``run_due_jobs(now=None)``: run every job due at ``now`` (default: the test clock),
  synchronously, in this thread and this database transaction, then return how many
  ran (a job whose ``expires`` passed ends ``expired`` instead, as with a worker). Rows
  scheduled inside a test transaction whose on-commit enqueue never fired are enqueued
  first (the outbox), and again once nothing is due if jobs ran (those they scheduled),
  so it works in ``TestCase`` tests too.
* ``advance(timedelta)``: move the test clock forward (and freezegun's frozen time, when
  a ``freeze_time`` is active) and run what became due.
* ``use_test_clock()``: make ``schedule(delay=...)`` measure from the test clock (which
  follows freezegun) instead of the Redis server's; the ``delayq`` fixture does this.
* ``isolated()``: a unique ``DELAYQ["PREFIX"]`` plus the test clock; yields a ``DelayQ``
  helper and deletes the prefix's keys on exit, once the event stream's flusher wrote
  the test's events (``django_delayq.pytest_plugin`` wraps it).
* ``run_worker()``: a real ``Worker`` in burst mode (threads, batched audit).
* ``run_eager(job_id)``: run one job inline right away, raising its exception if it fails
  (``DELAYQ["EAGER"]`` uses it; ``core.commit_batch`` raises it out of the commit), with
  the row a worker writes (``running`` while it runs) and the lifecycle signals a worker
  sends (worker id ``"eager"``).
"""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from django_delayq.core import api, connection, events, payloads, periodic
from django_delayq.core.conf import Settings, get_settings
from django_delayq.core.context import JobContext
from django_delayq.core.reconcile import Reconciler
from django_delayq.core.validation import at_ms
from django_delayq.engine.logtext import text
from django_delayq.engine.sharded import ShardedEngine as Engine
from django_delayq.exceptions import ResultTooLarge
from django_delayq.models import UNFINISHED_STATUSES, Job, JobAttempt, JobStatus, aware_datetime
from django_delayq.worker import attempt_signals, handover, outcome, runner
from django_delayq.worker.audit import AuditWriter

if TYPE_CHECKING:
    from django_delayq.engine.outcomes import ClaimedJob
    from django_delayq.worker.settle import Settler

WORKER_ID = "testing"
EAGER_ID = "eager"  # the worker id of DELAYQ["EAGER"] runs
_STARTABLE = (JobStatus.SCHEDULED, JobStatus.RETRYING)  # rows an eager run marks running
_offset_ms = 0
_offset_lock = threading.Lock()
_outside: list[frozenset[str]] = []  # per isolated() block: the unfinished rows not its own


# -- the test clock -----------------------------------------------------------------

def clock_ms() -> int:
    """Now on the test clock: ``time.time()`` (freezegun-aware) plus ``advance()`` offsets."""
    return int(time.time() * 1000) + _offset_ms


def reset_clock() -> None:
    global _offset_ms  # noqa: PLW0603 - the test clock, set under _offset_lock
    with _offset_lock:
        _offset_ms = 0


def _clocked(clock: Callable[[], int] = clock_ms) -> Engine:
    """The project's engine with the test clock: its scripts take "now" from ``clock``."""
    return Engine.like(connection.get_engine(), clock=clock)


@contextmanager
def use_test_clock() -> Iterator[Engine]:
    """Within the block, ``schedule()``/``cancel()``/… use the test clock (freezegun-aware)."""
    engine = _clocked()
    previous = connection._engine
    connection.set_engine(engine)
    try:
        yield engine
    finally:
        connection.set_engine(previous)


# -- running due jobs synchronously ---------------------------------------------------

def run_due_jobs(queues: list[str] | None = None, *, now: datetime | None = None,
                 max_jobs: int = 1000, flush_outbox: bool = True) -> int:
    """Run the jobs due at ``now`` (default: the test clock) one by one in this thread.

    Jobs that become due meanwhile (retries with no delay, jobs scheduled by jobs) run
    too; ``max_jobs`` bounds a job that keeps rescheduling itself. Returns the count.
    """
    from django_delayq.worker.settle import Settler  # lazy: apps.ready imports testing

    settings = get_settings()
    fixed = None if now is None else at_ms(now if now.tzinfo else now.replace(tzinfo=UTC))
    clock = clock_ms if fixed is None else (lambda: fixed)
    engine = _clocked(clock)
    names = tuple(queues or settings.queues)
    # Live rows Redis does not hold: their on-commit enqueue never fired (the test's
    # transaction never commits). Again once Redis has nothing due, if jobs ran since:
    # those they scheduled are in the same case.
    reconciler = Reconciler(engine, settings, names) if flush_outbox else None
    skip = _outside[-1] if _outside else frozenset()  # isolated(): the rows not its own
    if reconciler is not None:
        reconciler.run_all(grace_seconds=0.0, skip=skip)
    audit = AuditWriter(settings.audit_flush_seconds, settings.audit_batch)
    settler = Settler(engine, settings, audit, WORKER_ID, on_start=periodic.tick_started)
    ran = flushed = 0
    while ran < max_jobs:
        progressed = False
        for queue in names:
            claimed = engine.claim(queue, 1, settings.lease_ms).jobs
            progressed = progressed or bool(claimed)
            ran += _run_claimed(engine, settings, settler, queue, claimed, clock())
            audit.flush()
        if not progressed:
            if reconciler is None or flushed == ran:
                break
            reconciler.run_all(grace_seconds=0.0, skip=skip)
            flushed = ran
    return ran


def _run_claimed(engine: Engine, settings: Settings, settler: Settler, queue: str,
                 claimed: list[ClaimedJob], now_ms: int) -> int:
    """What the worker does with a claimed batch, in this thread: run the jobs whose row
    is live, end those whose row is unusable dead, set aside those without a live row,
    end ``expired`` those not started before their ``expires_at`` (on the test clock).
    Callable limits do not apply here: the jobs run one by one."""
    loaded = payloads.read(claimed)
    handover.set_aside(engine, queue, loaded.aside, settings.dead_max)
    outcomes = [outcome.unusable(bad.job, bad.path, bad.reason) for bad in loaded.broken]
    for job in loaded.run:
        env = payloads.of(job)
        if env.expires_ms is not None and now_ms >= env.expires_ms:
            outcomes.append(outcome.expired(job, env.path, env.expires_ms))
            continue
        outcomes.append(execute(job, settings, settler.started(job)))
    settler.settle(outcomes)
    return len(outcomes)


def advance(delta: timedelta | float, queues: list[str] | None = None) -> int:
    """Move time forward by ``delta`` and run the jobs that became due.

    Under ``freezegun.freeze_time`` the frozen clock is ticked (job code sees the new
    time); otherwise only the test clock moves (Redis due times, not ``timezone.now()``).
    """
    global _offset_ms  # noqa: PLW0603 - the test clock, set under _offset_lock
    if not isinstance(delta, timedelta):
        delta = timedelta(seconds=delta)
    if not _tick_freezegun(delta):
        with _offset_lock:
            _offset_ms += int(delta.total_seconds() * 1000)
    return run_due_jobs(queues)


def _tick_freezegun(delta: timedelta) -> bool:
    try:
        from freezegun import api as freezegun_api  # optional: when the test uses it
    except ImportError:
        return False
    factories = getattr(freezegun_api, "freeze_factories", None)
    if factories:
        factories[-1].tick(delta)
    return bool(factories)


def execute(job: ClaimedJob, settings: Settings,
            started_at: datetime | None = None) -> outcome.Outcome:
    """One attempt of ``job`` in this thread, on the test's own database connection;
    ``started_at``: its start, as ``Settler.started`` wrote it (None: now)."""
    return runner.run(job, worker_id=WORKER_ID, default_max_attempts=settings.default_max_attempts,
                      default_backoff=settings.default_backoff, manage_connections=False,
                      started_at=started_at)


# -- a real worker, eager runs --------------------------------------------------------

def run_worker(queues: list[str] | None = None, concurrency: int = 1) -> int:
    """Run a real ``Worker`` in burst mode (its own threads: use
    ``django_db(transaction=True)``); return how many jobs it claimed."""
    from django_delayq.worker.loop import Worker, WorkerOptions  # lazy: apps.ready imports testing

    settings = get_settings()
    worker = Worker(connection.get_engine(), settings, WorkerOptions(
        queues=tuple(queues or settings.queues), concurrency=concurrency, burst=True))
    worker.run()
    return worker.claimed_total


def run_eager(job_id: str) -> None:
    """Run job ``job_id`` now, in this thread, and record the outcome on its row; the row
    and the lifecycle signals are a worker's (``job_started``, then ``job_succeeded`` or
    ``job_dead``; worker id ``"eager"``): the row is ``running`` (attempt 1) while the
    function runs, so a ``cancel()`` of it then finds it running (``ALREADY_RUNNING``:
    it runs on, a failure is not retried but ends ``cancelled``, as with a worker)."""
    job = Job.objects.get(pk=job_id)
    started, t0 = timezone.now(), time.perf_counter()
    if not Job.objects.filter(pk=job_id, status__in=_STARTABLE).update(
            status=JobStatus.RUNNING, started_at=started, finished_at=None, attempts=1,
            worker_id=EAGER_ID, updated_at=started):  # a worker's start (Settler.started)
        # final (cancelled before the commit that runs it: a worker would not run it),
        # or running already
        return
    due = aware_datetime(job.run_at)  # naive in the row without USE_TZ: aware as a worker's
    ctx = JobContext(id=job.id, queue=job.queue, attempt=1, max_attempts=job.max_attempts,
                     due_at=due, worker_id=EAGER_ID, started_at=aware_datetime(started))
    base = {"job_id": job.id, "queue": job.queue, "callable_path": job.callable_path}
    attempt_signals.signal_started(base, 1, EAGER_ID, due, aware_datetime(started))
    try:
        result = runner.call_job(job.callable_path, job.args, job.kwargs, ctx)
    except BaseException as exc:  # a worker records a SystemExit too: the row never stays
        dead = _eager_failed(base, started, outcome.error_type(exc), text(exc, 2000),  # running
                             text(traceback.format_exc())[-20000:])
        if not isinstance(exc, Exception) or (dead and not job.task_backend):  # a Django
            raise  # task's failure is its result's, as Django's ImmediateBackend records it
        return
    kept, size = runner.stored_result(result)
    limit = get_settings().max_payload_bytes
    if size > limit:  # as a worker: dead (cancelled if asked), not retried, the value not kept
        error = runner.too_large(size, limit)
        dead = _eager_failed(base, started, runner.RESULT_TOO_LARGE, error, "")
        if dead and not job.task_backend:
            raise ResultTooLarge("job %s: %s" % (job_id, error))
        return
    if _eager_record(job_id, JobStatus.SUCCEEDED, started, result=kept) is not None:
        attempt_signals.signal_succeeded(base, 1, EAGER_ID, kept, time.perf_counter() - t0)


def _eager_record(job_id: str, status: str, started: datetime, **fields: Any) -> datetime | None:
    """An eager run's outcome on its row (attempt 1, worker ``"eager"``); returns its end,
    or None when the row is no longer ``running`` (made final meanwhile: left as it is)."""
    finished = timezone.now()
    if not Job.objects.filter(pk=job_id, status=JobStatus.RUNNING).update(
            status=status, attempts=1, started_at=started, finished_at=finished,
            worker_id=EAGER_ID, updated_at=finished, **fields):
        return None
    return finished


def _eager_failed(base: dict[str, Any], started: datetime, error_type: str, error: str,
                  trace: str) -> bool:
    """A failed eager run: its row ``dead`` (``cancelled`` when a cancel was asked while
    it ran: not retried, as a worker records it), its ``JobAttempt`` as a worker writes it
    (the Spark report counts failed attempts from those rows), then ``job_dead`` (or the
    worker's ``job_cancelled``, ``running=True``). Whether it ended ``dead``."""
    job_id = base["job_id"]
    asked = Job.objects.filter(pk=job_id, cancel_requested=True).exists()
    status = JobStatus.CANCELLED if asked else JobStatus.DEAD
    finished = _eager_record(job_id, status, started, error_type=error_type,
                             last_error=error, traceback=trace)
    if finished is None:
        return False
    JobAttempt.objects.create(job_id=job_id, number=1, outcome=status, started_at=started,
                              finished_at=finished, error_type=error_type, error=error,
                              traceback=trace, worker_id=EAGER_ID)
    attempt_signals.signal_failed(base, status, 1, EAGER_ID, error=error,
                                  error_type=error_type, started_at=aware_datetime(started))
    return status is JobStatus.DEAD


# -- an isolated prefix for one test ---------------------------------------------------

class DelayQ:
    """What the ``delayq`` fixture yields; ``outside``: the ids of the rows not finished
    when its block began (not the test's: ``isolated()``)."""

    run_due_jobs = staticmethod(run_due_jobs)
    advance = staticmethod(advance)

    def __init__(self, outside: frozenset[str] = frozenset()) -> None:
        self.outside = outside

    def jobs(self, **filters: object) -> Any:
        return Job.objects.filter(**filters)

    @property
    def engine(self) -> Engine:
        return connection.get_engine()

    def purge(self) -> None:
        """Cancel the test's jobs not finished yet (of the configured queues, but not the
        rows ``outside``) as ``cancel()`` does, then delete its queues' keys in Redis:
        none of them runs afterwards, not even from the outbox (docs/testing.md)."""
        for job_id in _unfinished_ids(get_settings().queues) - self.outside:
            api.cancel(job_id)
        self.purge_keys()

    def purge_keys(self) -> None:
        """Delete the keys of the configured queues in Redis; the rows stay as they are
        (a live one goes back to Redis at the next ``run_due_jobs``' outbox pass)."""
        for queue in get_settings().queues:
            self.engine.purge(queue)


def _unfinished_ids(queues: tuple[str, ...] | None = None) -> frozenset[str]:
    """The ids of the rows not finished now (live, or waiting for their parents), of
    ``queues`` (None: any); none when the test has no database access (pytest-django
    refuses it with a ``RuntimeError``)."""
    rows = Job.objects.filter(status__in=UNFINISHED_STATUSES)
    try:
        return frozenset((rows if queues is None else rows.filter(queue__in=queues))
                         .values_list("pk", flat=True))
    except RuntimeError:
        return frozenset()


@contextmanager
def isolated() -> Iterator[DelayQ]:
    """A unique ``DELAYQ["PREFIX"]`` and the test clock for the duration of one test.
    ``run_due_jobs`` inside it runs only jobs of the block, and the helper's ``purge()``
    cancels only those: the rows not finished when it began (another prefix's: the real
    queues', an outer block's) are not taken from the outbox into its prefix."""
    current = dict(getattr(settings, "DELAYQ", {}) or {})
    prefix = "%s-test-%s" % (current.get("PREFIX", "delayq"), uuid.uuid4().hex[:10])
    helper = DelayQ(_unfinished_ids())
    with override_settings(DELAYQ={**current, "PREFIX": prefix}), use_test_clock():
        _outside.append(helper.outside)
        try:
            yield helper
        finally:
            _outside.pop()
            events.reset()  # its flusher writes under the prefix: done before the keys go
            helper.purge_keys()  # the rows: the test database's (rolled back, flushed)
            helper.engine.purge_global()
            reset_clock()

