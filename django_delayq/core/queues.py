"""Operator controls of whole queues: pause, resume, purge.

* ``pause_queue(queue)``: workers claim nothing from it; ``schedule()`` still accepts jobs
  and due times are kept (what became due meanwhile runs after ``resume_queue``, late).
  Jobs already running finish. Returns whether the state changed.
* ``resume_queue(queue)``: claims again at once (the engine wakes the sleeping workers).
  Both are durable: the row, then Redis (core/pauses.py), written back by the
  reconciler after Redis lost them.
* ``paused_queues()``: the paused ones among the known queues (a sharded queue: every
  shard that answers is paused); ``PausedUnknown`` (a ``redis.exceptions.ConnectionError``)
  names the queues whose node does not answer (a Redis Cluster), with the paused others.
* ``pause_group(queue, group)``, ``resume_group(queue, group)``, ``paused_groups(queue)``:
  the same for one group of a queue (docs/groups.md): workers claim none of its jobs, the
  queue's other groups go on. ``purge_group(queue, group)``: as ``purge_queue``, for the
  group's jobs only (its rows found by their ``group`` column; the group is paused for
  the purge instead of the queue; each job leaves Redis by ``Engine.cancel``).
* ``purge_queue(queue)``: removes every job waiting in Redis (pending: due or not; not the
  running ones) and marks their rows ``cancelled`` with ``last_error`` "purged from queue
  <queue>"; returns how many. Its ``waiting`` rows (workflow children, not in Redis) are
  cancelled too, first, and counted; the children of every row a purge cancels are
  resolved in the transaction that cancels it, as ``cancel()`` resolves them
  (core/workflows.py). ``purge_queue_report(queue)`` does the same and tells also
  how many schedule ticks it kept (``PurgeReport``). **Schedule ticks stay**: the pending
  job of a periodic schedule's next tick (``Schedule.next_job_id``, its row
  ``scheduled``) is not purged: its row stays as it is and the job is back in Redis, due
  as before, when the purge ends (``purge_pending`` removes it with the rest; it is put
  back before the queue is resumed). A purged tick job could never be created again (its
  id comes from its tick's key): the schedule would skip that tick and show it as its last
  one, in the future. **Paused, then rows first**: the queue is paused for the
  purge (unless it was paused already), so no worker claims a job between the look at
  what waits in Redis and the row's cancel (a job claimed then would run with a row that
  says purged); the rows of the jobs waiting in Redis are cancelled (and committed)
  before any job leaves Redis, in batches of ``PURGE_BATCH``; then
  ``Engine.purge_pending`` removes the waiting jobs in bounded batches, and the queue is
  resumed. A purge that fails half-way leaves final rows whose jobs are still in Redis:
  a worker that claims one sets it aside without running it (its row is final) and the
  reconciler never re-enqueues a final row, so nothing purged comes back. A purge whose
  process is killed outright leaves the queue paused (visible in the admin and
  ``delayq_queue``): purge again, or resume it. Only a job scheduled while the purge runs
  is removed from Redis before its row is cancelled; a purge killed in that moment leaves
  it ``scheduled``, and the reconciler enqueues it again (as if it had been scheduled
  after the purge). A purge that fails after removing a kept tick job from Redis and
  before putting it back leaves its row ``scheduled``: the workers' keeper pass
  (core/tick_presence.py) or the reconciler enqueues it again.

A queue is known when ``DELAYQ["QUEUES"]`` or ``DELAYQ["QUEUE_OPTIONS"]`` names it; any
other name is an ``InvalidJob`` naming it (a typo must not pause nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import router, transaction
from django.db.models import F
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from django_delayq import signals
from django_delayq.core import limits, option_checks, pauses, validation, workflows
from django_delayq.core.conf import Settings, get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine.outcomes import CancelOutcome
from django_delayq.engine.replies import chunks
from django_delayq.engine.shard_health import UNREACHABLE, ShardDown
from django_delayq.exceptions import DelayQError
from django_delayq.models import LIVE_STATUSES, Job, JobStatus, Schedule

if TYPE_CHECKING:
    from django_delayq.engine import Engine

logger = logging.getLogger(__name__)

PURGE_BATCH = 200  # jobs removed per Redis call (Engine.purge_pending's bound)
# a re-enqueue (reenqueue.lua) is remembered this long, at most this many ids: another
# put-back of the same job within it is skipped (core/reconcile.py)
RECENT_SECONDS = 30.0
MAX_RECENT = 100_000
PURGED = "purged from queue %s"
PURGED_GROUP = "purged from group %s of queue %s"


def known_queues(s: Settings | None = None) -> tuple[str, ...]:
    s = get_settings() if s is None else s
    return limits.known_queues(s.queues, s.queue_options)


def known_queue(queue: str) -> str:
    """``queue`` when the settings name it, else an ``InvalidJob`` naming it."""
    return limits.known_queue(queue, known_queues())


def _logged(changed: bool, what: str, done: str) -> bool:
    """Log a pause (``done``: "paused") or a resume of ``what``; returns ``changed``."""
    unchanged = " (already)" if done == "paused" else " (was not paused)"
    logger.info("%s %s%s", what, done, "" if changed else unchanged)
    return changed


def pause_queue(queue: str) -> bool:
    """Stop claiming from ``queue``; True when it was not paused before."""
    return _logged(pauses.pause(known_queue(queue)), "queue %r" % queue, "paused")


def resume_queue(queue: str) -> bool:
    """Claim from ``queue`` again; True when it was paused."""
    return _logged(pauses.resume(known_queue(queue)), "queue %r" % queue, "resumed")


class PausedUnknown(DelayQError, RedisConnectionError):
    """``paused_queues()`` while the Redis Cluster node of some queues does not answer:
    whether they are paused is unknown. ``unknown``: each such queue -> its node's error;
    ``paused``: the paused ones among the others, in settings order. A
    ``redis.exceptions.ConnectionError``, as any call whose node does not answer."""

    def __init__(self, paused: list[str], unknown: dict[str, str]) -> None:
        super().__init__("whether queue(s) %s are paused is unknown: %s; paused among the "
                         "others: %s" % (", ".join(unknown), "; ".join(
                             "%s (%s)" % item for item in unknown.items()),
                                         ", ".join(paused) or "none"))
        self.paused, self.unknown = paused, unknown


def paused_queues() -> list[str]:
    """The paused queues among the known ones, in settings order (a sharded queue: every
    shard that answers is paused). ``PausedUnknown`` while some queue's node (every
    shard's, for a sharded one) does not answer; Redis's error when none does."""
    engine, names = get_engine(), list(known_queues())
    try:
        return list(engine.paused(names))
    except UNREACHABLE:
        if not engine.nodes_fail_alone:
            raise  # one Redis: unavailable
    paused, unknown = [], {}
    for queue in names:  # one at a time: those that answer
        try:
            paused += engine.paused([queue])
        except UNREACHABLE as exc:
            unknown[queue] = exc.reason if isinstance(exc, ShardDown) else (
                str(exc) or type(exc).__name__)
    if len(unknown) == len(names):
        engine.time_ms()  # does Redis answer at all? (else its error)
    if unknown:
        raise PausedUnknown(paused, unknown)
    return paused


def pause_group(queue: str, group: str) -> bool:
    """Claim none of ``group``'s jobs of ``queue``; True when it was not paused before."""
    changed = pauses.pause(known_queue(queue), option_checks.check_group(group))
    return _logged(changed, "group %r of queue %r" % (group, queue), "paused")


def resume_group(queue: str, group: str) -> bool:
    """Claim ``group``'s jobs of ``queue`` again; True when it was paused."""
    changed = pauses.resume(known_queue(queue), option_checks.check_group(group))
    return _logged(changed, "group %r of queue %r" % (group, queue), "resumed")


def paused_groups(queue: str) -> list[str]:
    """The paused groups of ``queue``, sorted."""
    return get_engine().paused_groups(known_queue(queue))


def purge_group(queue: str, group: str) -> int:
    """Remove ``group``'s waiting jobs of ``queue`` (not the running ones, nor schedules'
    next ticks) and cancel their rows, rows first, its ``waiting`` rows (workflow
    children) with them; returns how many left Redis plus those waiting rows."""
    engine, queue, group = get_engine(), known_queue(queue), option_checks.check_group(group)
    paused_here = engine.pause_group(queue, group)  # none claimed between look and cancel
    why, removed = PURGED_GROUP % (group, queue), 0
    try:
        removed = _cancel_waiting(queue, why, group=group)  # workflow children: not in Redis
        for waiting in _waiting_batches(engine, queue, None, group=group):
            _cancel_rows(queue, waiting, why)
            removed += sum(engine.cancel(queue, i) == CancelOutcome.CANCELLED for i in waiting)
    finally:
        if paused_here and not pauses.kept_group(queue, group):  # an operator's stays
            engine.resume_group(queue, group)
    logger.warning("group %r of queue %r purged: %d waiting job(s) removed", group, queue,
                   removed)
    return removed


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What a purge did: ``removed`` waiting jobs left Redis and their rows are
    ``cancelled``; ``ticks_kept`` pending jobs of periodic schedules' next ticks were left
    waiting (back in Redis, their rows untouched)."""

    removed: int
    ticks_kept: int


def purge_queue(queue: str) -> int:
    """Remove the queue's waiting jobs from Redis; their rows become ``cancelled``;
    returns how many (``purge_queue_report`` tells the schedule ticks kept too).

    The rows are cancelled first, then the jobs leave Redis (see the module docstring);
    loops over bounded batches until none is left; jobs scheduled meanwhile may be purged
    too. Running jobs are not touched (cancel them one by one), nor the pending jobs of
    periodic schedules' next ticks."""
    return purge_queue_report(queue).removed


def purge_queue_report(queue: str) -> PurgeReport:
    """``purge_queue``, telling what it removed and which schedule ticks it kept."""
    engine = get_engine()
    known_queue(queue)
    paused_here = engine.pause(queue)  # no claim between the look and the rows' cancel
    removed, ticks = 0, set()
    try:
        removed = _cancel_waiting(queue, PURGED % queue)  # workflow children: not in Redis
        # the rows of the jobs waiting in Redis first, each batch committed before the next
        for waiting in _waiting_batches(engine, queue, router.db_for_write(Job)):
            _cancel_rows(queue, waiting)
        while ids := engine.purge_pending(queue, limit=PURGE_BATCH):
            kept = pending_ticks(ids)  # out of Redis: put back before the resume
            ticks |= kept
            purged = [i for i in ids if i not in kept]
            removed += len(purged)
            _cancel_rows(queue, purged)  # only rows still live: jobs scheduled meanwhile
        kept_count = reenqueue_rows(ticks)  # due as before, under a new token
    finally:
        if paused_here and queue not in pauses.kept([queue]):  # an operator's pause stays
            engine.resume(queue)  # a job left by a failure has a final row: set aside
    logger.warning("queue %r purged: %d waiting job(s) removed, %d schedule tick(s) kept",
                   queue, removed, kept_count)
    return PurgeReport(removed=removed, ticks_kept=kept_count)


def pending_ticks(job_ids: Iterable[str], *, to_run: bool = False) -> set[str]:
    """Those of ``job_ids`` that are a schedule's pending next tick: a schedule names it
    as its next tick and its row is ``scheduled``. A purge keeps every such tick, a
    disabled schedule's too (its id comes from the tick's key: cancelled, it could never
    be created again). ``to_run``: only those due to run, whose schedule is enabled and
    does not name it as its last tick too (``tick_started`` writes that before the tick's
    function runs): the keeper's put-back."""
    schedules = Schedule.objects.filter(next_job_id__in=list(job_ids))
    if to_run:
        schedules = schedules.filter(enabled=True).exclude(last_job_id=F("next_job_id"))
    named = set(schedules.values_list("next_job_id", flat=True))
    return set(Job.objects.filter(pk__in=named, status=JobStatus.SCHEDULED)
               .values_list("pk", flat=True))


def reenqueue_rows(job_ids: Iterable[str]) -> int:
    """Put the jobs of ``job_ids`` whose row is ``scheduled`` back in Redis, due as their
    rows say, as the reconciler does (``Engine.reenqueue``, seeded with each row's
    attempts): the next delivery's token comes from the Redis clock, one no earlier
    delivery had (a worker may still hold one: from data Redis lost, or a delivery whose
    lease it outlived before a purge forgot the counter), and its attempt number is the
    row's attempts + 1. Returns how many Redis took (none it holds, holds a settled
    record of, or re-enqueued within ``RECENT_SECONDS``)."""
    by_queue: dict[str, list[tuple[str, int, int, str]]] = {}
    seeds: dict[str, int | None] = {}
    for chunk in chunks(list(job_ids), PURGE_BATCH):
        for job_id, queue, run_at, priority, group, attempts in Job.objects.filter(
                pk__in=chunk, status=JobStatus.SCHEDULED).values_list(
                "id", "queue", "run_at", "priority", "group", "attempts"):
            by_queue.setdefault(queue, []).append(
                (job_id, validation.at_ms(run_at), priority, group or ""))
            seeds[job_id] = attempts
    engine = get_engine()
    return sum(engine.reenqueue(queue, jobs, seeds, keep_ms=RECENT_SECONDS * 1000,
                                keep_max=MAX_RECENT) for queue, jobs in by_queue.items())


def _waiting_batches(engine: Engine, queue: str, using: str | None,
                     **filters: str) -> Iterator[list[str]]:
    """The ids of the live rows of ``queue`` (and ``filters``) whose job waits in Redis
    (pending or ready; not one in flight; not a schedule's next tick), ``PURGE_BATCH``
    rows per read. Rows in id order from a cursor: each row is looked at once."""
    after = ""
    while ids := list(Job.objects.using(using).filter(queue=queue, status__in=LIVE_STATUSES,
                                                      pk__gt=after, **filters)
                      .order_by("pk").values_list("pk", flat=True)[:PURGE_BATCH]):
        after = ids[-1]
        waiting = _waiting_in_redis(engine, queue, ids)
        ticks = pending_ticks(waiting) if waiting else set()
        if waiting := [i for i in waiting if i not in ticks]:  # schedule ticks: left waiting
            yield waiting


def _waiting_in_redis(engine: Engine, queue: str, ids: list[str]) -> list[str]:
    """Those of ``ids`` waiting in Redis (pending or ready), not in flight, as one read
    (``Engine.presence``: one MULTI per 100 ids) sees them. The queue or group is paused,
    so a job waiting then stays waiting; a job in flight then is left alone, also when it
    ends before the purge goes on (its row may still say ``scheduled``: the worker
    writes rows in batches)."""
    return [i for i, p in zip(ids, engine.presence(queue, ids)) if p.waiting]


def _cancel_waiting(queue: str, why: str, **filters: str) -> int:
    """The ``waiting`` rows of ``queue`` (and ``filters``: a group), workflow children
    not in Redis, -> cancelled as ``cancel()`` cancels a waiting job: every one of them
    first, then their own children, in one transaction. Returns how many rows changed."""
    ids = list(Job.objects.using(router.db_for_write(Job)).filter(
        queue=queue, status=JobStatus.WAITING, **filters).values_list("pk", flat=True))
    return _cancel_rows(queue, ids, why, JobStatus.WAITING) if ids else 0


def _cancel_rows(queue: str, ids: list[str], why: str = "", *statuses: str) -> int:
    """The purged jobs' rows of ``statuses`` (live ones unless told) -> cancelled (a row
    already final stays as it is; a ``running`` one too: its job was waiting in Redis,
    its lease given up or lost), then their workflow children resolved as ``cancel()``
    resolves them, in one transaction; returns how many rows changed."""
    now, using, changed = timezone.now(), router.db_for_write(Job), 0
    found: list[tuple[str, str]] = []
    with transaction.atomic(using=using):
        for chunk in chunks(ids, PURGE_BATCH):
            rows = Job.objects.using(using).filter(pk__in=chunk,
                                                   status__in=statuses or LIVE_STATUSES)
            found.extend(rows.values_list("id", "callable_path"))
            changed += rows.update(status=JobStatus.CANCELLED, last_error=why or PURGED % queue,
                                   finished_at=now, updated_at=now, parents_left=0)
        workflows.resolve([job_id for job_id, _ in found], using)  # children: cancelled
    for job_id, path in found:
        signals.send(signals.job_cancelled, job_id=job_id, queue=queue, callable_path=path,
                     running=False)
    return changed
