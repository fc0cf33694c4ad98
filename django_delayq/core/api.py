"""The public API: schedule, schedule_many, job, cancel, run_now, reschedule, requeue, get_job,
chain, group, and a job's result (``result_of``, ``wait``: ``core/results.py``).

``schedule()`` checks everything and raises ``InvalidJob`` naming the bad value. The
audit row is written in the caller's transaction; the job reaches Redis on commit
(idempotent by id). If Redis is down then, the row stays ``scheduled`` and the
worker's reconciler enqueues it later: the row is the durable record.

``chain(a, b, c)`` and ``group([...], then=summary)`` are thin helpers over ``after=``.
Each piece is a ``Signature``, ``job(fn).using(...).s(*args, **kwargs)``: the call's
options (queue, delay, priority, its own ``after`` ...) and the job's arguments. Every
job of one helper call is scheduled in one transaction: all of them or none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import groupby
from typing import Any

from django.conf import settings as django_settings
from django.db import OperationalError, connections, router, transaction
from django.utils import timezone

from django_delayq import signals
from django_delayq.core import commit_batch, options, row_insert, validation, workflows
from django_delayq.core.commit_batch import send as enqueue_or_outbox  # Spark's sink's send
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.option_checks import KEEP, StoredPaths, parent_ids
from django_delayq.core.options import JobOptions, JobSpec
from django_delayq.core.registry import check_schedulable
from django_delayq.core.results import read, result_of, wait
from django_delayq.core.workflows import Signature
from django_delayq.engine.outcomes import CancelOutcome, MoveOutcome
from django_delayq.exceptions import CANCEL_LOCKED, DelayQError, InvalidJob
from django_delayq.models import Job, JobStatus

__all__ = ["JobCall", "JobHandle", "JobOptions", "JobSpec", "cancel", "enqueue_or_outbox",
           "get_job", "job", "requeue", "reschedule", "run_now", "schedule", "schedule_many",
           "schedule_spec"]
MANY = "schedule_many"  # an error of one of its specs: "schedule_many item 3 (args ...): ..."
SIGS = "job(fn).s(*args, **kwargs) signatures"  # what chain() and group() take


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

    @property
    def result(self) -> Any:
        """The succeeded job's return value; ``JobNotFinished`` before it ends,
        ``JobFailed`` when it ended dead, cancelled or expired (``result_of``)."""
        return result_of(self.job)

    def wait(self, timeout: float | None = None, poll: float = 0.01) -> Any:
        """Block until the job is final, then return ``result`` (or raise as it does);
        ``WaitTimeout`` after ``timeout`` seconds. Refused inside an atomic block."""
        return wait(self.id, timeout, poll)


def schedule(fn: Callable[..., Any] | str, *args: object,
             delay: float | timedelta | None = None, at: datetime | None = None,
             queue: str | None = None, max_attempts: int | None = None, backoff: object = None,
             key: str | None = None, on_conflict: str = "keep", priority: int = 0,
             timeout: float | timedelta | None = None,
             expires: datetime | float | timedelta | None = None, retry_on: object = None,
             atomic: bool | None = None, group: str | None = None, after: object = None,
             after_failure: str = "cancel", **kwargs: object) -> JobHandle:
    """Run ``fn(*args, **kwargs)`` after ``delay`` (seconds or timedelta) or ``at``.

    Returns a ``JobHandle``. With ``key``, scheduling again with the same key (on the
    same queue) returns the first job instead of creating another; ``on_conflict=
    "replace"`` (debounce) or ``"drop"`` say otherwise (core/workflows.py). ``priority`` (-100 to
    100), ``timeout``, ``expires``, ``retry_on``, ``atomic`` and ``group`` (docs/groups.md):
    see ``core/options.py``. A job function whose keyword arguments are named like these
    options: use ``job(fn).using(...)``; for the last six, ``schedule()`` refuses the
    ambiguity.
    ``after``: jobs (handles or ids) that must succeed first; ``after_failure="run"``
    runs it even when one of them fails (docs/workflows.md).
    """
    # every option by name (a dict of ``locals()`` took ~1.7 µs more a call); each of
    # options.NAMES, as tests/core/test_schedule.py checks
    spec = JobSpec(args=args, kwargs=kwargs, delay=delay, at=at, queue=queue,
                   max_attempts=max_attempts, backoff=backoff, key=key, on_conflict=on_conflict,
                   priority=priority, timeout=timeout, expires=expires, retry_on=retry_on,
                   atomic=atomic, group=group, after=after, after_failure=after_failure)
    return _schedule(fn, spec, clash=True)


def schedule_spec(fn: Callable[..., Any] | str, spec: JobSpec, *, queue: str | None = None,
                  max_attempts: int | None = None, backoff: object = None,
                  any_queue: bool = False, task_backend: str = "") -> JobHandle:
    """``schedule()`` with the job's arguments given as values (any keyword names).

    ``queue``, ``max_attempts``, ``backoff``: for a spec that leaves its own ``None``.
    ``any_queue``: accept a queue ``DELAYQ["QUEUES"]`` does not list (the Tasks backend
    with ``QUEUES: []``, as Django's rule is); a worker must serve it with ``--queues``.
    ``task_backend``: the alias of the Django Tasks backend enqueuing it (kept on the row,
    so ``get_result()`` reports it)."""
    if not isinstance(spec, JobSpec):
        raise InvalidJob("schedule_spec takes a JobSpec, not %s (%s)"
                         % (validation.short(spec), type(spec).__name__))
    if queue is not None or max_attempts is not None or backoff is not None:
        spec = spec.under(JobOptions(queue=queue, max_attempts=max_attempts, backoff=backoff))
    return _schedule(fn, spec, any_queue=any_queue, task_backend=task_backend)


def _schedule(fn: Callable[..., Any] | str, spec: JobSpec, *, any_queue: bool = False,
              clash: bool = False, **columns: str | None) -> JobHandle:
    """``columns``: ``requeued_from``, ``task_backend`` (unset or empty: their defaults)."""
    c = spec.check(fn, any_queue=any_queue, clash=clash)
    values, new = c.new(spec.args, spec.kwargs, get_settings().max_payload_bytes)
    if columns:
        values.update((name, value) for name, value in columns.items() if value)
    using = router.db_for_write(Job)
    conn = connections[using]  # looked up once (a thread-local read)
    job_id, queue = new.id, c.queue
    status: str = JobStatus.SCHEDULED  # the column's default: no key, no parents
    if c.key is not None or c.parents:  # in a savepoint: core/workflows.py
        row = row_insert.new_row(**values)
        standing = workflows.insert(row, c, using)
        if standing is not None:  # the key's job stands (keep; drop while it is live)
            return JobHandle(standing, queue)
        status = row.status
    else:  # no key, no parents: no savepoint, one prepared INSERT (core/row_insert.py)
        row_insert.insert_values(values, using, conn)
    signals.send(signals.job_scheduled, job_id=job_id, queue=queue, callable_path=c.path,
                 run_at=values["run_at"])
    if status == JobStatus.CANCELLED:  # a parent failed before: cancelled as it waited would be
        signals.send(signals.job_cancelled, job_id=job_id, queue=queue, callable_path=c.path,
                     running=False)
    elif status == JobStatus.SCHEDULED:  # else waiting for its parents, or cancelled by one
        # a callback per call; in eager mode (unit tests) it runs the job, no Redis involved
        commit_batch.enqueue_after_commit(using, queue, [new], conn)
    return JobHandle(job_id, queue)


def schedule_many(fn: Callable[..., Any] | str, specs: Iterable[JobSpec], *,
                  queue: str | None = None, max_attempts: int | None = None,
                  backoff: object = None, priority: int | None = None,
                  timeout: float | timedelta | None = None,
                  expires: datetime | float | timedelta | None = None, retry_on: object = None,
                  atomic: bool | None = None, group: str | None = None, batch_size: int = 1000,
                  after: object = None, after_failure: str = "cancel") -> list[str]:
    """Schedule one job per spec with bulk inserts and one Redis call per batch.

    Specs with a ``key`` whose job already exists are skipped (their id is still
    returned), so replaying the same input never schedules a row twice. The call's
    options apply to the specs that leave theirs ``None``. A spec with its own ``queue``,
    ``max_attempts``, ``backoff`` or ``after`` takes the path of ``schedule()``, one job at
    a time, after the bulk insert of the others, in one transaction; the call's ``after``,
    or any spec with another ``on_conflict``, makes every spec take it, in order
    (docs/workflows.md). The ids come back in the order of the specs.
    """
    given = {name: value for name, value in locals().items() if name in options.NAMES}
    return _schedule_many(fn, specs, JobOptions(**given), batch_size)


def _schedule_many(fn: Callable[..., Any] | str, specs: Iterable[JobSpec], call: JobOptions,
                   batch_size: int) -> list[str]:
    validation.check_batch_size(batch_size)  # before anything is written or sent
    specs = options.spec_list(specs)
    using = router.db_for_write(Job)
    # a spec alone is scheduled as schedule() schedules one: it has parents, another
    # on_conflict, or a queue or retries of its own (a batch has the call's)
    alone = [spec.after is not None or spec.on_conflict != KEEP or spec.queue is not None
             or spec.max_attempts is not None or spec.backoff is not None for spec in specs]
    if call.after is None and not any(alone):
        return _bulk(fn, specs, call, batch_size, using)
    with transaction.atomic(using=using):
        if call.after is not None or options.one_by_one(specs, alone):
            call.check(fn)  # the call's own options first: their error names no spec
            return validation.each(MANY, specs, lambda s: _schedule(fn, s.under(call)).id)
        at = [i for i, a in enumerate(alone) if not a], [i for i, a in enumerate(alone) if a]
        bulk = iter(_bulk(fn, [specs[i] for i in at[0]], call, batch_size, using, at[0]))
        single = iter(validation.each(MANY, [specs[i] for i in at[1]],
                                      lambda s: _schedule(fn, s.under(call)).id, at[1]))
        return [next(single) if a else next(bulk) for a in alone]


def _bulk(fn: Callable[..., Any] | str, specs: list[JobSpec], call: JobOptions,
          batch_size: int, using: str, at: list[int] | None = None) -> list[str]:
    """The specs that take the call's options (none alone), in bulk: their ids in order
    (``at``: their positions among the call's specs, which an error names)."""
    # One INSERT (per 1,000 rows) and one Redis call (per 1,000 jobs) for the specs, each
    # made as schedule() makes one: the call's options checked once, a spec's own per spec
    c, max_payload = call.check(fn), get_settings().max_payload_bytes
    made = validation.each(MANY, specs, lambda spec: c.over(spec).new(
        spec.args, spec.kwargs, max_payload, spec.delay, spec.at), at)
    job_ids = [new.id for _, new in made]
    first: dict[str, Any] = {}
    for row, new in made:
        first.setdefault(new.id, (row, new))  # a key's first spec stands
    made = list(first.values())
    keyed = [new.id for row, new in made if "key" in row]  # replaying them adds nothing
    if keyed and (found := row_insert.existing(using, keyed, batch_size)):
        made = [(row, new) for row, new in made if new.id not in found]
    with transaction.atomic(using=using):
        row_insert.insert_many([row for row, _ in made], using, ignore_conflicts=bool(keyed),
                               batch_size=batch_size)
        if made:
            signals.send(signals.jobs_scheduled, queue=c.queue, callable_path=c.path,
                         job_ids=[new.id for _, new in made])
        commit_batch.enqueue_after_commit(using, c.queue, [new for _, new in made])
    return job_ids


@dataclass(frozen=True, slots=True)
class JobCall(JobOptions):
    """A job function with its scheduling options, kept apart from its arguments.

    ``job(fn).using(queue="emails", delay=60).schedule(*args, **kwargs)`` schedules
    ``fn(*args, **kwargs)`` exactly as ``schedule()`` would, but every keyword of
    ``.schedule()`` goes to the job function, whatever its name (``delay``, ``queue``,
    ``key``...). ``using()`` returns a new ``JobCall`` and checks its options at once;
    ``.schedule()`` checks everything again.
    """

    fn: Callable[..., Any] | str

    def using(self, **changes: Any) -> JobCall:
        """These options (``JobOptions``' names) replace the current ones (``None`` resets
        one); raises ``InvalidJob`` naming a bad option, as ``schedule()`` would."""
        if unknown := sorted(set(changes) - options.NAMES):
            raise TypeError("using() got an unexpected keyword argument %r" % unknown[0])
        changed = replace(self, **changes)
        changed.check(changed.fn)
        return changed

    def s(self, *args: object, **kwargs: object) -> Signature:
        """This call with its arguments, not scheduled yet: for ``chain`` and ``group``."""
        return Signature(call=self, args=args, kwargs=kwargs)

    def schedule(self, *args: object, **kwargs: object) -> JobHandle:
        """Schedule ``fn(*args, **kwargs)`` with this call's options."""
        return _schedule(self.fn, JobSpec(args=args, kwargs=kwargs).under(self))

    def schedule_many(self, specs: Iterable[JobSpec], *, batch_size: int = 1000) -> list[str]:
        """``schedule_many`` with this call's options; a spec that sets neither ``delay``
        nor ``at`` takes this call's. Each spec carries its own key."""
        if self.key is not None:
            raise InvalidJob("key=%r names one job: give each JobSpec its own key for "
                             "schedule_many" % (self.key,))
        return _schedule_many(self.fn, specs, self, batch_size)


def job(fn: Callable[..., Any] | str) -> JobCall:
    """``job(fn).using(...).schedule(*args, **kwargs)``: options apart from arguments.

    Nothing is checked until ``using()`` or ``schedule()``, so ``job(fn)`` may sit at
    module level before Django's settings are ready."""
    return JobCall(fn)


def get_job(job_id: str) -> Job:
    try:
        return read(job_id, only=())
    except RecursionError:  # only a row edited by hand: schedule() refuses such nesting
        raise InvalidJob("job %s: its row holds JSON nested too deeply to load (more than "
                         "%d levels)" % (job_id, validation.MAX_DEPTH)) from None


def cancel(job_id: str) -> CancelOutcome:
    """Cancel a job: CANCELLED (it will never run), ALREADY_RUNNING (a worker holds it:
    it runs to its end but is not retried; held for a free thread, it does not start,
    unless within about 0.2 s, or one read of its row's duration when the database is
    slower: ``worker/held_cancels.py``), or NOT_FOUND (it already finished)."""
    row = get_job(job_id)
    if row.is_final:  # dead included: final, kept for investigation and requeue
        return CancelOutcome.NOT_FOUND
    try:
        return workflows.cancel(row, router.db_for_write(Job))
    except OperationalError as exc:
        if "database is locked" in str(exc):  # SQLite, past its busy timeout
            raise DelayQError(CANCEL_LOCKED % row.id) from exc
        raise


def reschedule(job_id: str, *, delay: float | timedelta | None = None,
               at: datetime | None = None) -> MoveOutcome:
    """Move a pending job to ``at`` or ``delay`` from now; ``run_now`` is ``delay=0``. One
    this transaction scheduled moves with its send at the commit (``move_unsent``); one
    committed before, at the commit (nothing on a rollback: ``workflows.move``). A job
    not started yet gets its ``scheduled_for`` (the Tasks ``run_after``) moved too."""
    row = get_job(job_id)
    at, seconds = validation.when(delay, at, django_settings.USE_TZ)
    return workflows.move(row, router.db_for_write(Job), at, seconds)


def run_now(job_id: str) -> MoveOutcome:
    return reschedule(job_id, delay=0)


def requeue(job_id: str, *, delay: float | timedelta = 0) -> JobHandle:
    """Run a finished job again, without its expiry. A dead job still in Redis gets fresh
    attempts under its id; any other (or a dead one Redis trimmed) is copied to a new job
    (its row's values checked as at ``schedule()``) with its priority, time limit, retry_on,
    atomic, group and parents (``after``, ``after_failure``: it waits for them), whose
    ``requeued_from`` names it. Either way the row's path must pass the allow-list first."""
    row = get_job(job_id)
    check_schedulable(row.callable_path)
    seconds = validation.delay_seconds(delay)
    if row.status == JobStatus.DEAD and _requeue_dead(row, seconds):
        return JobHandle(row.id, row.queue)
    if not row.is_final:
        raise InvalidJob("job %s is %s; only finished jobs can be requeued" % (row.id, row.status))
    retry_on = row.retry_on  # as stored, checked as text (not imported again)
    after, after_failure = workflows.parents_of(row.id)  # a workflow child's copy waits too
    spec = JobSpec(args=row.args, kwargs=row.kwargs, delay=seconds, queue=row.queue,
                   after=after or None, after_failure=after_failure,
                   max_attempts=row.max_attempts, backoff=row.backoff, priority=row.priority,
                   timeout=row.timeout, atomic=row.atomic, group=row.group or None,
                   retry_on=StoredPaths(retry_on) if isinstance(retry_on, list) else retry_on)
    return _schedule(row.callable_path, spec, any_queue=True, requeued_from=row.id,
                     task_backend=row.task_backend)


def _requeue_dead(row: Job, seconds: float) -> bool:
    """Dead -> scheduled under the same id, without its expiry (as a copy); False when
    Redis no longer holds the job. ``attempts`` 0: Redis numbers them from 1 again (its
    ``JobAttempt`` rows stay, in recording order). The row says ``scheduled`` *before*
    Redis hands the job out again: a worker runs only jobs whose row is live."""
    now = timezone.now()
    live = {"status": JobStatus.SCHEDULED, "attempts": 0, "expires_at": None,
            "run_at": now + timedelta(seconds=seconds), "finished_at": None, "updated_at": now}
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
                finished_at=row.finished_at, expires_at=row.expires_at, updated_at=timezone.now())
    return outcome is MoveOutcome.MOVED


# -- chain and group: helpers over after= ---------------------------------------------

@dataclass(frozen=True, slots=True)
class GroupResult:
    """What ``group()`` returns: the members' ids, in order, and the ``then`` job."""

    ids: list[str]
    then: JobHandle | None


def _checked(pieces: object, what: str) -> list[Signature]:
    """``pieces`` as a list of signatures; ``InvalidJob`` naming what is not one."""
    if isinstance(pieces, Signature):
        raise InvalidJob("%s takes an iterable of %s, not one signature: %s([sig])"
                         % (what, SIGS, what[:-2]))
    if isinstance(pieces, str | bytes | bytearray) or not isinstance(pieces, Iterable):
        raise InvalidJob("%s takes an iterable of %s; not %s (%s)"
                         % (what, SIGS, validation.short(pieces), type(pieces).__name__))
    out = list(pieces)
    for i, piece in enumerate(out):
        if not isinstance(piece, Signature):
            raise InvalidJob("%s item %d is %s (%s); it takes %s" % (
                what, i, validation.short(piece), type(piece).__name__, SIGS))
    return out


def schedule_signature(sig: Signature, after: Sequence[str] = ()) -> JobHandle:
    """Schedule ``sig``, waiting for ``after`` on top of its call's own ``after``."""
    call: JobCall = sig.call
    if after:
        call = replace(call, after=[*after, *parent_ids(call.after)])
    return call.schedule(*sig.args, **sig.kwargs)


def chain(*pieces: Signature) -> list[JobHandle]:
    """Schedule ``pieces`` so that each one runs after the one before it succeeded; a
    piece that fails cancels the rest (its ``after_failure="run"`` runs it anyway).
    Returns their handles, in order."""
    sigs = _checked(pieces, "chain()")
    if not sigs:
        raise InvalidJob("chain() needs at least one signature")
    handles: list[JobHandle] = []
    with transaction.atomic(using=router.db_for_write(Job)):  # errors name the piece
        validation.each("chain()", sigs, lambda sig: handles.append(
            schedule_signature(sig, [handles[-1].id] if handles else ())))
    return handles


def group(pieces: Iterable[Signature], *, then: Signature | None = None) -> GroupResult:
    """Schedule every piece (they run in parallel) and, with ``then``, a job that runs
    once all of them succeeded. Runs of pieces with the same call go through
    ``schedule_many`` (bulk inserts): 10,000 pieces are one call per 1,000."""
    sigs = _checked(pieces, "group()")
    if then is not None and not isinstance(then, Signature):
        raise InvalidJob("group(then=...) takes one of the %s; not %s (%s)"
                         % (SIGS, validation.short(then), type(then).__name__))
    ids: list[str] = []
    with transaction.atomic(using=router.db_for_write(Job)):  # errors name the piece
        for call, run in groupby(sigs, key=lambda sig: sig.call):
            batch, at = list(run), range(len(ids), len(ids) + len(sigs))
            if len(batch) == 1 or call.key is not None:
                ids.extend(validation.each("group()", batch, lambda s: schedule_signature(s).id,
                                           at))
                continue
            try:
                ids.extend(call.schedule_many([JobSpec(args=sig.args, kwargs=sig.kwargs)
                                               for sig in batch]))
            except InvalidJob as exc:  # schedule_many's names its position in the batch
                i = exc.index or 0 if isinstance(exc, validation.ItemError) else 0
                raise validation.ItemError("group()", at[i], batch[i].args, batch[i].kwargs,
                                           exc) from None
        last = None
        if then is not None:
            try:
                last = schedule_signature(then, ids)
            except InvalidJob as exc:
                raise validation.ItemError("group(then=...)", None, then.args, then.kwargs,
                                           exc) from None
    return GroupResult(ids=ids, then=last)
