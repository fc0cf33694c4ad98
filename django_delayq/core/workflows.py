"""Jobs that wait for other jobs: ``schedule(fn, after=[a, b])`` (docs/workflows.md).

A child waits, row ``waiting`` and absent from Redis, until each of its parents is final.
Edges are ``JobDependency`` rows; the child's ``parents_left`` counts its unresolved
edges. **Release invariant**: an edge is resolved exactly once, in the database
transaction that makes its parent's row final (the audit writer's flush, the
reconciler's settle, ``cancel()``, a purge), and that transaction decrements the child's
``parents_left`` by the number of edges it resolved itself (an ``UPDATE ... WHERE
resolved = false`` count) and, when it reaches 0, turns the child ``scheduled``. The child
reaches Redis on commit; a crash in between leaves a live ``scheduled`` row missing from
Redis, which the reconciler enqueues (the outbox). A parent that fails (dead, cancelled,
expired) cancels a waiting child in the same transaction (the cancel cascades to its own
children), unless the child was scheduled with ``after_failure="run"``. ``sweep()``, run
by the reconciler, resolves edges whose parent is final but which no transaction resolved
(a parent made final by a path without the hook): the net, not the rule.

**Keys**: what a key does at ``schedule()`` time, ``on_conflict="keep"``, ``"replace"``
or ``"drop"``.

``keep`` (the default) is an idempotency key: the job's id derives from (queue, key), so
the second INSERT of that id fails and the first job stands, forever. ``replace`` and
``drop`` give each job a fresh id and record the key's holder in a ``JobKey`` row, one per
(queue, key), unique. In the caller's transaction a call creates that row if it is
missing (``INSERT ... ON CONFLICT DO NOTHING``; its first holder is the ``keep`` id of the
key, so a ``keep`` job already there counts), locks it (``SELECT ... FOR UPDATE``), reads
the holder's job row and decides:

- the holder is pending (``scheduled``, ``retrying``, ``waiting``): ``drop`` returns it;
  ``replace`` cancels it (the engine's cancel first, as ``cancel()`` does) and takes the key;
- it is running: ``drop`` returns it; ``replace`` lets it run on (its Redis entry is
  marked: a failure is not retried) and takes the key;
- it finished (any final status), or there is no such row: the new job takes the key.

The key is taken with a compare-and-set ``UPDATE ... WHERE job_id = <holder read>``.
**Invariant: the calls of one (queue, key) take its row lock one after the other, each
seeing the holder the previous one committed**, so at most one job of the key is pending
(``replace``: the last committed call's) and ``drop`` creates a job only when the holder
is final. The lock is held until the caller's transaction ends. See docs/internals.md,
"Deduplication keys".
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from redis.exceptions import RedisError

from django_delayq import signals
from django_delayq.core import commit_batch, ids, validation
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.option_checks import DROP, KEEP
from django_delayq.engine.logtext import shown
from django_delayq.engine.outcomes import CancelOutcome, MoveOutcome, NewJob
from django_delayq.engine.replies import chunks, grouped
from django_delayq.exceptions import DelayQError, InvalidJob
from django_delayq.models import (
    FINAL_STATUSES,
    UNFINISHED_STATUSES,
    Job,
    JobDependency,
    JobKey,
    JobStatus,
)

if TYPE_CHECKING:
    from django_delayq.core.options import Checked

logger = logging.getLogger(__name__)

FAILED = (JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.EXPIRED)
CHUNK = 500  # ids per IN (...) query
MAX_ANCESTORS = 10_000  # the cycle check walks at most this many ancestors
SWEEP_EDGES = 500  # edges per sweep() call
ROUNDS = 5  # a key's compare-and-set attempts; the row lock makes the first one succeed
# How long Redis holds back a job a cancel found nowhere (its send under way), should it
# arrive before the cancel's commit makes its row final (lua/cancel.lua): longer than a
# transaction that cancels stays open; a rolled-back cancel delays such a job as long
HOLD_MS = 300_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Signature:
    """A job not scheduled yet: ``job(fn).using(...).s(*args, **kwargs)``; the pieces of
    ``chain`` and ``group`` (core/api.py). ``call`` is the ``JobCall``."""

    call: Any
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def cancel_reason(parent_id: str, status: str) -> str:
    return "parent %s ended %s" % (parent_id, status)


# -- schedule time -------------------------------------------------------------------


def plan(row: Job, c: Checked, using: str) -> list[JobDependency]:
    """Inside the schedule transaction: lock the parents' rows (a parent finishing now
    waits for our commit, so its flush sees our edge), set the new child ``row``'s status
    (``scheduled``, ``waiting``, or ``cancelled`` by a parent that failed already) and
    return its edges, to save once the row is."""
    child_id, parents = row.id, list(c.parents)
    if child_id in parents:
        raise InvalidJob("after=: job %s cannot wait for itself" % child_id)
    status: dict[str, str] = {}
    for chunk in chunks(parents, CHUNK):
        rows = Job.objects.using(using).select_for_update().filter(pk__in=chunk)
        status.update(rows.values_list("id", "status"))
    if missing := [p for p in parents if p not in status]:
        raise InvalidJob("after=: no job with id %r" % missing[0])
    if c.key is not None and c.on_conflict == KEEP:  # its id may be named already
        check_no_cycle(child_id, parents, using)
    edges = [JobDependency(parent_id=p, child_id=child_id, resolved=status[p] in FINAL_STATUSES,
                           run_on_failure=c.run_on_failure) for p in parents]
    left = sum(not edge.resolved for edge in edges)
    failed = [p for p in parents if status[p] in FAILED]
    if failed and not c.run_on_failure:  # cancelled, naming the first parent that failed
        reason = cancel_reason(failed[0], status[failed[0]])
        row.status, row.last_error, row.finished_at = JobStatus.CANCELLED, reason, c.now
    elif left:
        row.status, row.parents_left = JobStatus.WAITING, left
    return edges


def parents_of(job_id: str, using: str | None = None) -> tuple[list[str], str]:
    """The parents ``job_id`` was scheduled ``after`` (those retention has not deleted),
    in the order of their edges, and its ``after_failure``: what ``requeue()`` gives the
    copy of a workflow child, so that it waits for them as the original did."""
    edges = list(JobDependency.objects.using(using).filter(child_id=job_id).order_by("pk")
                 .values_list("parent_id", "run_on_failure"))
    return [p for p, _ in edges], "run" if any(run for _, run in edges) else "cancel"


def check_no_cycle(child_id: str, parents: list[str], using: str) -> None:
    """A keyed id may be named before its job exists: refuse an ancestor that is it."""
    seen, frontier = set(parents), list(parents)
    while frontier and len(seen) < MAX_ANCESTORS:
        up = list(JobDependency.objects.using(using).filter(
            child_id__in=frontier[:CHUNK]).values_list("parent_id", flat=True))
        frontier = frontier[CHUNK:] + [p for p in up if p not in seen]
        if child_id in up:
            raise InvalidJob("after=: job %s would wait for itself (a cycle through %s)"
                             % (child_id, sorted(seen)[0]))
        seen.update(up)


# -- release: in the transaction that makes parents final ----------------------------


def resolve(parent_ids: Iterable[str], using: str) -> list[str]:
    """Resolve the open edges of those parents whose row is final; decrement, release or
    cancel their children; cascade. Call inside the transaction that wrote the parents'
    final rows (it opens one otherwise). Returns the ids released to Redis (on commit)."""
    todo, released = list(dict.fromkeys(parent_ids)), []
    with transaction.atomic(using=using, savepoint=False):
        if not JobDependency.objects.using(using).filter(resolved=False).exists():
            return []  # no workflow waits: one probe without parameters (index prefix)
        while todo:
            chunk, todo = todo[:CHUNK], todo[CHUNK:]
            count, failed = _resolve_edges(chunk, using)
            todo.extend(_cancel_children(failed, using))
            released.extend(_decrement(count, using))
        if released:
            _release(released, using)
    return released


def _resolve_edges(parents: Sequence[str],
                   using: str) -> tuple[dict[str, int], dict[str, str]]:
    """Lock and resolve the open edges of the final ones among ``parents``. ``SELECT ...
    FOR UPDATE WHERE resolved = false`` returns only edges no other transaction resolved
    (PostgreSQL re-checks the condition after waiting for a lock; SQLite runs one writer
    at a time), so each edge is counted by exactly one transaction. Returns the edges
    resolved: per child, how many, and the first failed parent's reason."""
    count: dict[str, int] = defaultdict(int)
    failed: dict[str, str] = {}
    edges = JobDependency.objects.using(using)
    if not edges.filter(parent_id__in=parents, resolved=False).exists():
        return count, failed  # the usual case: one indexed probe per flush
    final = dict(Job.objects.using(using).filter(pk__in=parents, status__in=FINAL_STATUSES)
                 .values_list("id", "status"))
    open_ = list(edges.select_for_update().filter(parent_id__in=list(final), resolved=False)
                 .values_list("pk", "parent_id", "child_id", "run_on_failure"))
    for chunk in chunks(open_, CHUNK):
        edges.filter(pk__in=[e[0] for e in chunk]).update(resolved=True)
    for _, parent, child, run_anyway in open_:
        if final[parent] in FAILED and not run_anyway:
            failed.setdefault(child, cancel_reason(parent, final[parent]))
        else:
            count[child] += 1
    return count, failed


def _cancel_children(failed: dict[str, str], using: str) -> list[str]:
    """Waiting children of failed parents end cancelled, naming the parent; returns them
    (their own children follow)."""
    now, out = timezone.now(), []
    jobs = Job.objects.using(using)
    for child, reason in failed.items():
        if jobs.filter(pk=child, status=JobStatus.WAITING).update(
                status=JobStatus.CANCELLED, last_error=reason, finished_at=now,
                updated_at=now, parents_left=0):
            logger.info("job %s cancelled: %s", shown(child), shown(reason, 2000))
            out.append(child)
    for job_id, queue, path in jobs.filter(pk__in=out).values_list("id", "queue",
                                                                    "callable_path"):
        signals.send(signals.job_cancelled, job_id=job_id, queue=queue, callable_path=path,
                     running=False)
    return out


def _decrement(count: dict[str, int], using: str) -> list[str]:
    jobs = Job.objects.using(using)
    for n, children in grouped(count, lambda child: count[child]).items():
        for chunk in chunks(children, CHUNK):
            jobs.filter(pk__in=chunk, parents_left__gte=n).update(
                parents_left=F("parents_left") - n)
    return [job_id for chunk in chunks(list(count), CHUNK) for job_id in jobs.filter(
        pk__in=chunk, status=JobStatus.WAITING, parents_left=0).values_list("id", flat=True)]


def _release(ids: list[str], using: str) -> None:
    """Waiting -> scheduled, due at its own due time or now, whichever is later; to Redis
    when the transaction commits (with its priority and group)."""
    now = timezone.now()
    jobs = Job.objects.using(using)
    for chunk in chunks(ids, CHUNK):
        jobs.filter(pk__in=chunk, run_at__lt=now).update(run_at=now)
        jobs.filter(pk__in=chunk, status=JobStatus.WAITING).update(
            status=JobStatus.SCHEDULED, updated_at=now)
    for queue, new in scheduled_jobs(ids, using).items():  # eager: run at commit
        commit_batch.enqueue_after_commit(using, queue, new)


def scheduled_jobs(job_ids: Iterable[str], using: str | None = None,
                   per_read: int = CHUNK) -> dict[str, list[NewJob]]:
    """The jobs of those of ``job_ids`` whose row is ``scheduled``, by queue, for Redis:
    each due as its row says, with its priority and group (``per_read`` rows a query)."""
    by_queue: dict[str, list[NewJob]] = {}
    for chunk in chunks(list(job_ids), per_read):
        for job_id, queue, run_at, priority, group in Job.objects.using(using).filter(
                pk__in=chunk, status=JobStatus.SCHEDULED).values_list(
                "id", "queue", "run_at", "priority", "group"):
            by_queue.setdefault(queue, []).append(NewJob(
                id=job_id, at_ms=validation.at_ms(run_at), priority=priority, group=group))
    return by_queue


def sweep(using: str, limit: int = SWEEP_EDGES) -> int:
    """The net: open edges whose parent is final (made final by a path without the hook,
    or before this code ran). Bounded: at most ``limit`` parents; returns how many."""
    parents = list(JobDependency.objects.using(using).filter(
        resolved=False, parent_id__in=Job.objects.using(using).filter(
            status__in=FINAL_STATUSES).values("id"))
        .values_list("parent_id", flat=True).distinct()[:limit])
    if parents:
        logger.info("workflows: %d finished parent(s) had open edges; resolving",
                    len(parents))
        resolve(parents, using)
    return len(parents)


# -- keys: keep, replace, drop -------------------------------------------------------

def insert(row: Job, c: Checked, using: str) -> str | None:
    """Insert a keyed or waiting job (its options ``c``) in a savepoint. None: ``row`` was
    inserted; else the id of the job that stands instead (``keep``: the key's first;
    ``drop``: the live one)."""
    keep = c.on_conflict == KEEP
    try:
        with transaction.atomic(using=using):
            edges = plan(row, c, using) if c.parents else []  # waiting, cancelled ...
            # A job born final (a parent already failed: cancelled) takes no key: it would
            # replace the live job with one that never runs.
            if c.key is not None and not keep and row.status not in FINAL_STATUSES:
                live = take(row, c.on_conflict, using)
                if live is not None:
                    return live
            row.save(force_insert=True, using=using)
            JobDependency.objects.using(using).bulk_create(edges, batch_size=CHUNK)
    except IntegrityError:
        if c.key is None or not keep:
            raise
        return row.id  # same key, same id: the first job stands
    return None


def take(row: Job, mode: str, using: str) -> str | None:
    """Make ``row`` (not saved yet) the holder of its key, as ``mode`` says; returns the
    id of the live holder that stands instead (``drop``), else None."""
    keys = JobKey.objects.using(using)
    which = {"queue": row.queue, "key": row.key}
    for _ in range(ROUNDS):
        keys.bulk_create([JobKey(**which, job_id=ids.id_for_key(row.queue, str(row.key)))],
                         ignore_conflicts=True)
        holder = keys.select_for_update().filter(**which).values_list("job_id",
                                                                      flat=True).first()
        if holder is None:
            continue  # deleted meanwhile: create it again
        live = (Job.objects.using(using).filter(pk=holder, status__in=UNFINISHED_STATUSES)
                .only("id", "queue", "status", "callable_path").first())  # pending or running
        if live is not None and mode == DROP:
            return live.id
        if live is not None:
            cancel(live, using, replaced_by=row.id)
        if keys.filter(**which, job_id=holder).update(job_id=row.id):
            return None
    raise DelayQError("key %r of queue %r: its holder changed %d times in a row while this "
                      "call tried to take it" % (row.key, row.queue, ROUNDS))


def cancel(row: Job, using: str, replaced_by: str = "") -> CancelOutcome:
    """Cancel ``row``'s job (``cancel()``; ``replaced_by``: ``on_conflict="replace"``'s
    new job): Redis first (a job it cancels never runs; one already running runs on,
    marked not to be retried, its row marked ``cancel_requested`` by ``cancel()``); the
    row decides when Redis does not hold the job (``_in_redis``), and Redis is told after
    the row's commit (a worker never runs a job whose row is final). In eager mode (no
    Redis) the row decides; there a ``running`` row is an eager run
    (``testing.run_eager``): already running."""
    eager, held = get_settings().eager, False
    if eager and row.status == JobStatus.RUNNING:
        outcome = CancelOutcome.ALREADY_RUNNING
    elif eager and (row.status == JobStatus.WAITING or replaced_by):
        outcome = CancelOutcome.CANCELLED
    else:
        outcome, held = _in_redis(row, replaced_by)
    now, running = timezone.now(), outcome is CancelOutcome.ALREADY_RUNNING
    jobs = Job.objects.using(using).filter(pk=row.pk)
    if running and not replaced_by:
        jobs.update(cancel_requested=True, updated_at=now)
    elif outcome is not CancelOutcome.CANCELLED:
        return outcome  # not found; or running, replaced: it runs on, the key moves on
    else:
        reason = "replaced by %s" % replaced_by if replaced_by else ""
        extra = {"last_error": reason} if reason else {}
        # a replace runs inside its key's transaction already: no savepoint of its own
        with nullcontext() if replaced_by else transaction.atomic(using=using):
            changed = jobs.filter(status__in=UNFINISHED_STATUSES).update(
                status=JobStatus.CANCELLED, finished_at=now, updated_at=now, **extra)
            if changed or not replaced_by:
                resolve([row.pk], using)  # its waiting children follow
        if held:  # after the row's commit (just made, in autocommit): job and hold go
            commit_batch.after_sends(using, lambda: get_engine().cancel(row.queue, row.id))
        if not changed:  # final meanwhile (its worker's row landed): not cancelled
            return outcome if replaced_by else CancelOutcome.NOT_FOUND
        if reason:
            logger.info("job %s cancelled: %s", shown(row.id), shown(reason, 2000))
    signals.send(signals.job_cancelled, job_id=row.id, queue=row.queue,
                 callable_path=row.callable_path, running=running)
    return outcome


def _in_redis(row: Job, replaced_by: str) -> tuple[CancelOutcome, bool]:
    """Redis's cancel of ``row``'s job, and whether the row decides with Redis holding
    the job back (lua/cancel.lua's hold) until the cancel the caller sends after the
    row's commit. A row not final and not running whose job Redis holds nowhere decides:
    its send may be under way (committed by another process; a waiting job's release
    committing now), Redis lost it, or it is waiting; not when Redis settled the job a
    moment ago (it ran: its worker's row is coming). Redis not answering: a replace, or
    the cancel of a waiting job, goes on with the row deciding, no hold."""
    unsent = row.status in (JobStatus.SCHEDULED, JobStatus.RETRYING, JobStatus.WAITING)
    engine = get_engine()
    try:
        found = (engine.cancel_held(row.queue, row.id, HOLD_MS) if unsent
                 else engine.cancel(row.queue, row.id))
        if found is None:  # settled: not found, and the row must not say cancelled
            return CancelOutcome.NOT_FOUND, False
        outcome = found
    except RedisError as exc:
        if not (replaced_by or row.status == JobStatus.WAITING):
            raise
        logger.warning("job %s: Redis unavailable for its cancel (%s); its row decides "
                       "(a worker does not run a job whose row is final)", shown(row.id),
                       shown(exc))
        outcome = CancelOutcome.NOT_FOUND
    if outcome is CancelOutcome.NOT_FOUND and unsent:
        return CancelOutcome.CANCELLED, True
    return outcome, False


def move(row: Job, using: str, at: datetime | None, seconds: float) -> MoveOutcome:
    """``reschedule()`` / ``run_now()``: one this transaction scheduled moves with its send
    (``commit_batch.move_unsent``), its row at once. One committed before: in autocommit
    Redis moves it now; in a transaction of ``using`` (the row's database) the outcome is
    where Redis has it now, and a pending job moves at the commit (not if it, or the
    call's savepoint, rolls back). The row is written only after Redis moved the job: one
    claimed or finished before the commit is not moved, its row keeps its due time."""
    at_ms, delay_ms = None if at is None else validation.at_ms(at), int(seconds * 1000)
    if row.status == JobStatus.SCHEDULED and commit_batch.move_unsent(
            using, row.id, at_ms, delay_ms):  # not sent yet: its send moves
        _write_due(row, using, _due(at, seconds))
        return MoveOutcome.MOVED
    if transaction.get_connection(using).get_autocommit():
        return _move_now(row, using, at, seconds)
    place = get_engine().inspect(row.queue, row.id).place
    if place != "pending":
        return MoveOutcome.ALREADY_RUNNING if place == "inflight" else MoveOutcome.NOT_FOUND
    transaction.on_commit(lambda: _move_at_commit(row, using, at, seconds), using=using,
                          robust=True)
    return MoveOutcome.MOVED


def _due(at: datetime | None, seconds: float) -> datetime:
    return (timezone.now() + timedelta(seconds=seconds) if at is None
            else validation.stored_time(at, django_settings.USE_TZ))


def _move_now(row: Job, using: str, at: datetime | None, seconds: float) -> MoveOutcome:
    run_at = _due(at, seconds)  # before Redis moves it
    at_ms = None if at is None else validation.at_ms(at)
    outcome, due = get_engine().reschedule(row.queue, row.id, delay_ms=int(seconds * 1000),
                                           at_ms=at_ms)
    if outcome is MoveOutcome.MOVED:
        if due is not None and due > int(run_at.timestamp() * 1000) + 1000:
            # held back by a cancel under way (lua/move.lua): the row says when Redis has it
            run_at = validation.stored_time(datetime.fromtimestamp(due / 1000, tz=UTC),
                                            django_settings.USE_TZ)
        _write_due(row, using, run_at)
    return outcome


def _move_at_commit(row: Job, using: str, at: datetime | None, seconds: float) -> None:
    try:
        outcome = _move_now(row, using, at, seconds)
    except RedisError as exc:
        logger.warning("job %s: Redis unavailable for its move at the commit (%s); it keeps "
                       "its due time", shown(row.id), shown(exc))
        return
    if outcome is not MoveOutcome.MOVED:
        logger.info("job %s: not moved at the commit: no longer pending in Redis (%s)",
                    shown(row.id), outcome.name)


def _write_due(row: Job, using: str, run_at: datetime) -> None:
    jobs = Job.objects.using(using).filter(pk=row.pk)
    jobs.update(run_at=run_at, updated_at=timezone.now())
    jobs.filter(attempts=0).update(scheduled_for=run_at)  # not started: moved too
