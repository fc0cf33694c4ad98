"""The public API: schedule, schedule_many, job, cancel, run_now, reschedule, requeue, get_job.

``schedule()`` checks everything and raises ``InvalidJob`` naming the bad value. The
audit row is written in the caller's transaction; the job reaches Redis on commit
(idempotent by id). If Redis is down then, the row stays ``scheduled`` and the
worker's reconciler enqueues it later: the row is the durable record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, router, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from django_delayq import signals
from django_delayq.core import bulk, ids, registry, validation
from django_delayq.core.conf import Settings, get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine import CancelOutcome, NewJob
from django_delayq.engine.engine import MoveOutcome
from django_delayq.exceptions import InvalidJob, JobNotFound
from django_delayq.models import LIVE_STATUSES, Job, JobStatus

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """One job of ``schedule_many``."""

    args: Sequence[Any] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    delay: float | timedelta | None = None
    at: datetime | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class JobHandle:
    """What ``schedule()`` returns: the job id plus shortcuts to its audit row."""

    id: str
    queue: str

    @property
    def job(self) -> Job:
        return get_job(self.id)

    @property
    def status(self) -> str:
        return self.job.status

    def refresh(self) -> Job:
        return self.job

    def cancel(self) -> CancelOutcome:
        return cancel(self.id)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Common:
    path: str
    queue: str
    max_attempts: int
    backoff: Any


def _common(fn: Any, queue: str | None, max_attempts: Any, backoff: Any, s: Settings) -> _Common:
    validation.check_text(fn, "the callable path")
    path = registry.path_of(fn)
    registry.check_schedulable(path)
    queue = s.default_queue if queue is None else queue
    if queue not in s.queues:
        raise InvalidJob("unknown queue %r; DELAYQ['QUEUES'] is %r" % (queue, list(s.queues)))
    validation.check_backoff(backoff)
    if max_attempts is None:
        is_list = isinstance(backoff, (list, tuple))
        max_attempts = len(backoff) + 1 if is_list else s.default_max_attempts
    validation.check_max_attempts(max_attempts)
    if isinstance(backoff, tuple):
        backoff = list(backoff)
    return _Common(path=path, queue=queue, max_attempts=max_attempts, backoff=backoff)


def _when(delay: Any, at: Any) -> tuple[datetime | None, float]:
    """The due time checked: ``(at, 0)``, or ``(None, delay in seconds)``."""
    if delay is not None and at is not None:
        raise InvalidJob("pass delay or at, not both (delay=%r, at=%r)" % (delay, at))
    if at is not None:
        return validation.check_at(at, django_settings.USE_TZ), 0.0
    return None, validation.delay_seconds(0 if delay is None else delay)


def _build(c: _Common, spec: JobSpec, s: Settings, now: datetime) -> tuple[dict[str, Any], NewJob]:
    """One job's row values and its id for Redis (``schedule``; ``schedule_many`` uses
    ``bulk``, with the same checks from ``validation``)."""
    args, kwargs = list(spec.args), dict(spec.kwargs)
    _, _, size = validation.encode_args(args, kwargs)
    at, seconds = _when(spec.delay, spec.at)
    if at is not None:
        run_at, new = at, {"at_ms": validation.at_ms(at)}
    else:
        run_at, new = now + timedelta(seconds=seconds), {"delay_ms": int(seconds * 1000)}
    if spec.key is not None:
        validation.check_key(spec.key)
    job_id = ids.new_id() if spec.key is None else ids.id_for_key(c.queue, spec.key)
    validation.check_size(size + validation.payload_head_size(c.path, c.max_attempts, c.backoff),
                          s.max_payload_bytes)
    row = dict(id=job_id, queue=c.queue, callable_path=c.path, args=args, kwargs=kwargs,
               key=spec.key, run_at=run_at, created_at=now, updated_at=now,
               max_attempts=c.max_attempts, backoff=c.backoff)
    # The payload stays in the row: Redis gets the id and the due time.
    return row, NewJob(id=job_id, at_ms=new.get("at_ms"), delay_ms=new.get("delay_ms", 0))


_eager: list[Callable[[str], object]] = []


def set_eager_runner(runner: Callable[[str], object]) -> None:
    """What runs a job inline when ``DELAYQ["EAGER"]`` is on: ``django_delayq.testing``
    plugs its runner in when the app is ready (a hook: this layer never imports it)."""
    _eager[:] = [runner]


def _eager_runner() -> Callable[[str], object]:
    if not _eager:
        raise ImproperlyConfigured("DELAYQ['EAGER'] is on but no eager runner is set: is "
                                   "'django_delayq' in INSTALLED_APPS?")
    return _eager[0]


def enqueue_or_outbox(queue: str, jobs: list[NewJob]) -> None:
    """Send committed jobs to Redis; when it is down, their rows wait for the reconciler."""
    try:
        get_engine().enqueue(queue, jobs)
    except RedisError as exc:
        logger.warning("Redis unavailable; %d job(s) of queue %r stay in the outbox for the "
                       "reconciler: %s", len(jobs), queue, exc)


def _after_commit(using: str, fn: Callable[[], object]) -> None:
    transaction.on_commit(fn, using=using, robust=True)


def schedule(
    fn: Callable[..., Any] | str,
    *args: Any,
    delay: float | timedelta | None = None,
    at: datetime | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
    backoff: Any = None,
    key: str | None = None,
    **kwargs: Any,
) -> JobHandle:
    """Run ``fn(*args, **kwargs)`` after ``delay`` (seconds or timedelta) or ``at``.

    Returns a ``JobHandle``. With ``key``, scheduling again with the same key (on the
    same queue) returns the first job instead of creating another. A job function whose
    keyword arguments are named like these options: use ``job(fn).using(...)``.
    """
    spec = JobSpec(args=args, kwargs=kwargs, delay=delay, at=at, key=key)
    return schedule_spec(fn, spec, queue=queue, max_attempts=max_attempts, backoff=backoff)


def schedule_spec(fn: Callable[..., Any] | str, spec: JobSpec, *, queue: str | None = None,
                  max_attempts: int | None = None, backoff: Any = None) -> JobHandle:
    """``schedule()`` with the job's arguments given as values (any keyword names)."""
    key = spec.key
    s = get_settings()
    common = _common(fn, queue, max_attempts, backoff, s)
    values, new = _build(common, spec, s, timezone.now())
    row = Job(**values)
    using = router.db_for_write(Job)
    if key is not None:
        try:
            with transaction.atomic(using=using):
                row.save(force_insert=True, using=using)
        except IntegrityError:
            return JobHandle(row.id, row.queue)  # same key: the first job stands
    else:
        row.save(force_insert=True, using=using)
    signals.send(signals.job_scheduled, job_id=row.id, queue=row.queue,
                 callable_path=row.callable_path, run_at=row.run_at)
    if s.eager:  # unit tests: run inline after commit, no Redis involved
        run_eager = _eager_runner()
        _after_commit(using, lambda: run_eager(row.id))
    else:
        _after_commit(using, lambda: enqueue_or_outbox(row.queue, [new]))
    return JobHandle(row.id, row.queue)


def schedule_many(
    fn: Callable[..., Any] | str,
    specs: Iterable[JobSpec],
    *,
    queue: str | None = None,
    max_attempts: int | None = None,
    backoff: Any = None,
    batch_size: int = 1000,
) -> list[str]:
    """Schedule one job per spec with bulk inserts and one Redis call per batch.

    Specs with a ``key`` whose job already exists are skipped (their id is still
    returned), so replaying the same input never schedules a row twice.
    """
    s = get_settings()
    common = _common(fn, queue, max_attempts, backoff, s)
    using = router.db_for_write(Job)
    batch = bulk.build(using, specs, queue=common.queue, path=common.path,
                       max_attempts=common.max_attempts, backoff=common.backoff,
                       now=timezone.now(), use_tz=django_settings.USE_TZ,
                       max_payload=s.max_payload_bytes)
    batch.drop_existing(batch_size)
    with transaction.atomic(using=using):
        batch.insert(batch_size)
        jobs = batch.jobs
        if jobs:
            signals.send(signals.jobs_scheduled, queue=common.queue, callable_path=common.path,
                         job_ids=[job.id for job in jobs])
        _after_commit(using, lambda: enqueue_or_outbox(common.queue, jobs))
    return batch.ids


_KEEP: Any = object()  # using(): "this option is not given, keep the current value"


@dataclass(frozen=True, slots=True)
class JobCall:
    """A job function with its scheduling options, kept apart from its arguments.

    ``job(fn).using(queue="emails", delay=60).schedule(*args, **kwargs)`` schedules
    ``fn(*args, **kwargs)`` exactly as ``schedule()`` would, but every keyword of
    ``.schedule()`` goes to the job function, whatever its name (``delay``, ``queue``,
    ``key``...). ``using()`` returns a new ``JobCall`` and checks its options at once;
    ``.schedule()`` goes through ``schedule_spec``, which checks everything again.
    """

    fn: Callable[..., Any] | str
    delay: float | timedelta | None = None
    at: datetime | None = None
    queue: str | None = None
    max_attempts: int | None = None
    backoff: Any = None
    key: str | None = None

    def using(self, *, delay: float | timedelta | None = _KEEP, at: datetime | None = _KEEP,
              queue: str | None = _KEEP, max_attempts: int | None = _KEEP,
              backoff: Any = _KEEP, key: str | None = _KEEP) -> JobCall:
        """These options replace the current ones (``None`` resets one); raises
        ``InvalidJob`` naming a bad option, as ``schedule()`` would."""
        given = dict(delay=delay, at=at, queue=queue, max_attempts=max_attempts,
                     backoff=backoff, key=key)
        changed = replace(self, **{k: v for k, v in given.items() if v is not _KEEP})
        changed.check()
        return changed

    def check(self) -> None:
        """The checks of ``schedule()`` that do not depend on the job's arguments."""
        _common(self.fn, self.queue, self.max_attempts, self.backoff, get_settings())
        _when(self.delay, self.at)
        if self.key is not None:
            validation.check_key(self.key)

    def schedule(self, *args: Any, **kwargs: Any) -> JobHandle:
        """Schedule ``fn(*args, **kwargs)`` with this call's options."""
        spec = JobSpec(args=args, kwargs=kwargs, delay=self.delay, at=self.at, key=self.key)
        return schedule_spec(self.fn, spec, queue=self.queue, max_attempts=self.max_attempts,
                             backoff=self.backoff)

    def schedule_many(self, specs: Iterable[JobSpec], *, batch_size: int = 1000) -> list[str]:
        """``schedule_many`` with this call's queue, max_attempts and backoff; a spec that
        sets neither ``delay`` nor ``at`` takes this call's. Each spec carries its own key."""
        if self.key is not None:
            raise InvalidJob("key=%r names one job: give each JobSpec its own key for "
                             "schedule_many" % (self.key,))
        if self.delay is not None or self.at is not None:
            specs = (spec if spec.delay is not None or spec.at is not None
                     else replace(spec, delay=self.delay, at=self.at) for spec in specs)
        return schedule_many(self.fn, specs, queue=self.queue, max_attempts=self.max_attempts,
                             backoff=self.backoff, batch_size=batch_size)


def job(fn: Callable[..., Any] | str) -> JobCall:
    """``job(fn).using(...).schedule(*args, **kwargs)``: options apart from arguments.

    Nothing is checked until ``using()`` or ``schedule()``, so ``job(fn)`` may sit at
    module level before Django's settings are ready."""
    return JobCall(fn)


def get_job(job_id: str) -> Job:
    try:
        return Job.objects.get(pk=job_id)
    except Job.DoesNotExist:
        raise JobNotFound("no job with id %r" % (job_id,)) from None
    except RecursionError:  # only a row edited by hand: schedule() refuses such nesting
        raise InvalidJob("job %s: its row holds JSON nested too deeply to load (more than "
                         "%d levels)" % (job_id, validation.MAX_DEPTH)) from None


def _mark_cancelled(row: Job, running: bool) -> None:
    now = timezone.now()
    if running:
        Job.objects.filter(pk=row.pk).update(cancel_requested=True, updated_at=now)
    else:
        Job.objects.filter(pk=row.pk, status__in=LIVE_STATUSES + (JobStatus.DEAD,)).update(
            status=JobStatus.CANCELLED, finished_at=now, updated_at=now)
    signals.send(signals.job_cancelled, job_id=row.id, queue=row.queue,
                 callable_path=row.callable_path, running=running)


def cancel(job_id: str) -> CancelOutcome:
    """Cancel a job: CANCELLED (it will never run), ALREADY_RUNNING (it runs to its end
    but is not retried), or NOT_FOUND (it already finished)."""
    row = get_job(job_id)
    if row.is_final and row.status != JobStatus.DEAD:
        return CancelOutcome.NOT_FOUND
    outcome = get_engine().cancel(row.queue, row.id)
    if outcome is CancelOutcome.NOT_FOUND and row.status in (JobStatus.SCHEDULED,
                                                             JobStatus.RETRYING):
        # Not in Redis yet (enqueue waits for commit, or Redis lost it): the row decides.
        outcome = CancelOutcome.CANCELLED
        queue, jid = row.queue, row.id
        _after_commit(router.db_for_write(Job), lambda: get_engine().cancel(queue, jid))
    if outcome is not CancelOutcome.NOT_FOUND:
        _mark_cancelled(row, running=outcome is CancelOutcome.ALREADY_RUNNING)
    return outcome


def reschedule(job_id: str, *, delay: float | timedelta | None = None,
               at: datetime | None = None) -> MoveOutcome:
    """Move a pending job to ``at`` or ``delay`` from now; ``run_now`` is ``delay=0``."""
    row = get_job(job_id)
    if delay is not None and at is not None:
        raise InvalidJob("pass delay or at, not both (delay=%r, at=%r)" % (delay, at))
    if at is not None:
        run_at = validation.check_at(at, django_settings.USE_TZ)
        outcome, _ = get_engine().reschedule(row.queue, row.id, at_ms=validation.at_ms(run_at))
    else:
        seconds = validation.delay_seconds(delay or 0)
        run_at = timezone.now() + timedelta(seconds=seconds)
        outcome, _ = get_engine().reschedule(row.queue, row.id, delay_ms=int(seconds * 1000))
    if outcome is MoveOutcome.MOVED:
        Job.objects.filter(pk=row.pk).update(run_at=run_at, updated_at=timezone.now())
    return outcome


def run_now(job_id: str) -> MoveOutcome:
    return reschedule(job_id, delay=0)


def requeue(job_id: str, *, delay: float | timedelta = 0) -> JobHandle:
    """Run a finished job again. A dead job still in Redis gets fresh attempts under the
    same id; any other finished job (or a dead one Redis trimmed) is copied to a new job
    (its row's values checked like ``schedule()``'s). Either way the row's callable path
    must pass the allow-list first, as at ``schedule()``."""
    row = get_job(job_id)
    registry.check_schedulable(row.callable_path)
    seconds = validation.delay_seconds(delay)
    if row.status == JobStatus.DEAD and _requeue_dead(row, seconds):
        return JobHandle(row.id, row.queue)
    if not row.is_final:
        raise InvalidJob("job %s is %s; only finished jobs can be requeued" % (row.id, row.status))
    return schedule_spec(row.callable_path,
                         JobSpec(args=row.args, kwargs=row.kwargs, delay=seconds),
                         queue=row.queue, max_attempts=row.max_attempts, backoff=row.backoff)


def _requeue_dead(row: Job, seconds: float) -> bool:
    """Dead -> scheduled under the same id; False when Redis no longer holds the job.

    The row says ``scheduled`` *before* Redis hands the job out again: a worker runs only
    jobs whose row is live, and sets aside one whose row is final (dead)."""
    now = timezone.now()
    live = dict(status=JobStatus.SCHEDULED, attempts=0, run_at=now + timedelta(seconds=seconds),
                finished_at=None, updated_at=now)
    if not Job.objects.filter(pk=row.pk, status=JobStatus.DEAD).update(**live):
        row.refresh_from_db()
        return False
    outcome = None
    try:
        outcome, _ = get_engine().requeue(row.queue, row.id, delay_ms=int(seconds * 1000))
    finally:
        if outcome is not MoveOutcome.MOVED:  # not in Redis's dead set (or Redis failed)
            Job.objects.filter(pk=row.pk, status=JobStatus.SCHEDULED, updated_at=now).update(
                status=JobStatus.DEAD, attempts=row.attempts, run_at=row.run_at,
                finished_at=row.finished_at, updated_at=timezone.now())
    return outcome is MoveOutcome.MOVED
