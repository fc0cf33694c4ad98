"""What one reconciler remembers between ticks: where its walks are, the rows it looks
at twice and what it did (``core/reconcile.py``; the Redis outage it saw:
``core/outage.py``); which workers are alive (``Liveness``), what a re-enqueued job's
attempts counter starts from, and how a row of a job final in Redis is settled
(``settle``).

The workers registry (``Engine.workers`` & co.: each worker's last heartbeat, Redis ms)
tells the reconciler whether a row's worker may still flush it (alive: it heartbeated
within two leases) or died with its audit buffer (silent for ``SILENT_BEATS`` heartbeat
periods); a silent entry whose worker recorded a clean stop after its last heartbeat
(``core/worker_stops.py``) hides no unrecorded run.

Attempts and lease tokens across a re-enqueue
---------------------------------------------
The attempts counter in Redis is the lease token. A re-enqueue seeds it (HSETNX, in the
same MULTI as enqueue.lua: never lowers a counter Redis holds) so that the next
delivery's token is higher than any token the job may have been given:

* ``running`` row: seeded with the row's attempts (that attempt ran or is lost);
* ``scheduled``/``retrying`` row due by now: a worker may have claimed it, run it and
  died before its first audit write (the row says nothing of that run). That happened
  when a worker active since the row was last written has gone silent (its heartbeat
  is older than ``SILENT_BEATS`` heartbeat periods, and it recorded no clean stop since:
  ``core/worker_stops.py``): the counter is seeded with
  attempts + 1, so the re-run is attempt n + 2, under a token of its own, and the audit
  counts the unrecorded run. While such a worker has been neither heard from since the
  first look nor silent long enough, the decision waits. A row never delivered (the
  outbox: Redis was down at commit) keeps its count: its first run is attempt 1.

``JobAttempt`` numbers are not a further source: they are written in the same
transaction as the row's attempts, and exceed them only after a requeue, which restarts
the count on purpose.

Rows of jobs final in Redis
---------------------------
The reconciler settles them (``settle``) instead of re-enqueueing.

A live row whose job has a settled record in Redis (``Engine.ack``/``nack`` with a
holder: succeeded, expired, or cancelled while it ran) was settled by a worker whose
audit row has not landed: while that worker heartbeats its flush is coming (a stalled
database delays it, nothing more); once it is silent the row is settled from the record
(status, attempt, when), without the result or error text the worker kept, and the job
is not run again.

A live row whose id is in the dead set (a final nack or a lease recovery out of
attempts reached Redis; the worker died before its audit flush) is settled ``dead``
after the reconciler's second look: attempts from Redis's counter, the reason
``DEAD_IN_REDIS`` and a ``JobAttempt``. A ``running`` row whose cancel was asked and
whose job is gone is settled ``cancelled`` (the cancel forbade another run). Neither is
counted as "held": such a row would otherwise stay live forever. The update is
conditional on the row being unchanged, so a late flush of a live worker wins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import router, transaction
from django.db.models import Q
from django.utils import timezone

from django_delayq import signals
from django_delayq.core import worker_stops, workflows
from django_delayq.core.validation import at_ms
from django_delayq.engine.logtext import shown
from django_delayq.engine.replies import grouped
from django_delayq.exceptions import LeaseLost, WorkerLost, type_path
from django_delayq.models import (
    LIVE_STATUSES,
    Job,
    JobAttempt,
    JobStatus,
    aware_datetime,
    db_datetime,
)

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.engine.outbox import Presence

logger = logging.getLogger(__name__)

BATCH = 500  # rows a query of a walk reads


@dataclass(slots=True)
class Cursor:
    """A walk over the live rows of ``queues`` changed at least ``grace`` seconds ago (and
    at or after ``since``, None: all), ``batch`` rows at a time, but for the ids in
    ``skip``; ``lost``: rows of data Redis lost; ``dry_run``: found, never acted on. Its
    position: status index, then (run_at, pk)."""

    queues: tuple[str, ...]
    grace: float
    lost: bool = False
    since: datetime | None = None
    batch: int = BATCH
    dry_run: bool = False
    skip: frozenset[str] = frozenset()  # rows left alone (testing.isolated: not its own)
    status: int = 0
    after: tuple[datetime, str] | None = None

    @property
    def wrapped(self) -> bool:
        """Back at the start: a full walk is done."""
        return self.status == 0 and self.after is None


@dataclass(frozen=True, slots=True)
class Suspect:
    status: str
    updated_at: datetime
    seen: float  # monotonic
    seen_ms: int  # Redis clock: workers heard from after this were alive after the look
    lost: bool  # found in a loss pass: a live worker does not keep a running row


@dataclass(slots=True)
class PassStats:
    examined: int = 0
    enqueued: int = 0
    settled: int = 0
    orphans: int = 0
    waiting_on_live_worker: int = 0
    outage_passes: int = 0
    missing: list[str] = field(default_factory=list)
    to_settle: list[str] = field(default_factory=list)


# The JobAttempt of a delivery a re-enqueue counts without knowing whether it ran.
UNRECORDED = ("may have run without being recorded (Redis lost its data, or the worker "
              "that had it died before recording it); counted as an attempt")
LOST_WITH_DATA = "its lease was lost with Redis's data; the job was put back to run again"

# How rows are read (``unqueueable.read``: a row whose columns cannot be, ended dead alone)
Read = Callable[["QuerySet[Job]", int], list[Job]]
LIGHT = ("id", "queue", "status", "worker_id", "run_at", "created_at", "updated_at",
         "attempts", "cancel_requested", "callable_path", "priority", "group")


def live_rows(cursor: Cursor, read: Read) -> list[Job]:
    """Up to ``cursor.batch`` rows of ``cursor``'s walk from where it is, through ``read``
    (``unqueueable.read``); advances it (wraps to the start)."""
    cutoff = timezone.now() - timedelta(seconds=cursor.grace)
    while cursor.status < len(LIVE_STATUSES):
        rows = Job.objects.filter(status=LIVE_STATUSES[cursor.status], queue__in=cursor.queues,
                                  updated_at__lte=cutoff).only(*LIGHT)
        if cursor.since is not None:
            rows = rows.filter(updated_at__gte=cursor.since)
        if cursor.after is not None:
            at, pk = cursor.after
            rows = rows.filter(Q(run_at__gt=at) | Q(run_at=at, pk__gt=pk))
        found = read(rows.order_by("run_at", "pk"), cursor.batch)
        # from the last row with a due time (the others' are bad: ``unqueueable`` ends them)
        if len(found) == cursor.batch and (last := [r for r in found if isinstance(
                r.run_at, datetime)][-1:]):
            cursor.after = (last[0].run_at, last[0].pk)
        else:
            cursor.status, cursor.after = cursor.status + 1, None
        if found := [row for row in found if row.pk not in cursor.skip]:
            return found
    cursor.status, cursor.after = 0, None
    return []


def by_queue(rows: Sequence[Job]) -> dict[str, list[Job]]:
    return grouped(rows, lambda row: row.queue)


def places(engine: Engine, rows: Sequence[Job]) -> Iterator[tuple[Job, Presence]]:
    """Each row with where Redis holds its job (``Engine.presence``, by queue)."""
    for queue, items in by_queue(rows).items():
        yield from zip(items, engine.presence(queue, [r.pk for r in items]), strict=True)


class Liveness:
    """The workers' heartbeats as the reconciler of ``engine`` reads them."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine, self.settings = engine, settings

    def alive(self, worker_ids: set[str]) -> set[str]:
        """Those of ``worker_ids`` that heartbeated within two leases."""
        ids = sorted(w for w in worker_ids if w and isinstance(w, str))  # bad: unqueueable
        if not ids:
            return set()
        scores = self.engine.worker_beats(ids)
        horizon = self.engine.time_ms() - 2 * self.settings.lease_ms
        return {w for w, score in zip(ids, scores) if score is not None and score >= horizon}

    @property
    def silent_ms(self) -> int:
        """How old a heartbeat is when its worker may be dead (``SILENT_BEATS`` periods)."""
        return worker_stops.SILENT_BEATS * self.settings.lease_ms // 3

    def orphaned(self, queues: Sequence[str], skip: Container[str], batch: int,
                 read: Read) -> list[Job]:
        """The oldest ``batch`` running rows of ``queues`` (not in ``skip``) unchanged for two
        leases whose worker is silent: died (or stopped) with its audit buffer, so its
        flush is not coming. Running rows are as many as the workers' threads: one query,
        one ZMSCORE."""
        cutoff = timezone.now() - timedelta(seconds=2 * self.settings.lease_seconds)
        rows = [r for r in read(Job.objects.filter(status=JobStatus.RUNNING, queue__in=queues,
                                                   updated_at__lte=cutoff)
                                .only(*LIGHT).order_by("updated_at"), batch) if r.pk not in skip]
        alive = self.alive({r.worker_id for r in rows}) if rows else set()
        return [r for r in rows if r.worker_id not in alive]

    def any_alive(self) -> bool:
        """Whether any worker heartbeated lately (its audit flush may be on its way)."""
        return bool(self.engine.count_workers(self.engine.time_ms() - self.silent_ms))

    def seeds(self, rows: Sequence[Job], seen: Mapping[str, Suspect] | None,
              margin_s: float) -> dict[str, int | None]:
        """The attempts counter each re-enqueued job starts from (None: decide later).

        A scheduled or retrying row due by now may describe a job a worker ran and died
        before recording: counted (+1) when a worker active since the row was written has
        gone silent; not counted when every such worker was heard from after the first
        look (its flush would have changed the row); undecided otherwise. ``seen``: each
        row's first look (``Suspect.seen_ms``: when it was found missing, Redis ms), None
        on a first look; ``margin_s``: how far ahead of now a row's due time still counts
        as due."""
        seeds: dict[str, int | None] = {r.pk: r.attempts for r in rows}
        now = timezone.now()
        due = [r for r in rows if r.status != JobStatus.RUNNING
               and r.run_at <= now + timedelta(seconds=margin_s)]
        if not due:
            return seeds
        offset_ms = self.engine.time_ms() - at_ms(now)  # Redis clock - this host's clock

        def since(row: Job) -> int:  # a worker that delivered it was alive after this
            return at_ms(max(row.updated_at, row.run_at)) + offset_ms - self.settings.lease_ms

        # The last heartbeats (Redis ms) of the workers heard from since the oldest row's
        # moment, and the beat a worker silent (dead, most likely) last gave at the latest.
        # A silent worker that stopped cleanly after its last beat (Redis was unreachable
        # as it left the registry: ``core/worker_stops.py``) recorded its runs: left out.
        silent_before = self.engine.time_ms() - self.silent_ms
        found = self.engine.beats_since(min(since(r) for r in due))
        clean = worker_stops.stopped([(w, b) for w, b in found if b < silent_before], offset_ms)
        beats = tuple(b for w, b in found if w not in clean)
        for row in due:
            first, active = seen[row.pk].seen_ms if seen else None, since(row)
            if any(active <= b < silent_before for b in beats):  # one active since has gone silent
                seeds[row.pk] = row.attempts + 1
            elif first is not None and not all(b > first for b in beats if b >= active):
                seeds[row.pk] = None  # not every one active since was heard after the look
        return seeds


def count_lost_deliveries(rows: Sequence[Job], seeds: dict[str, int | None],
                          lost_at: Mapping[str, datetime], witnessed: set[str],
                          margin_s: float, window_s: float) -> None:
    """Raise the seeds of rows whose job Redis lost (``lost_at``: when each queue's data
    set began): a scheduled or retrying row created and due before it may have been
    claimed (and run) in the lost data without its row saying so yet, under its attempts
    + 1 (the attempts of its row count what earlier re-enqueues charged:
    ``record_charges``). Its next delivery gets a higher one: no attempt number is handed
    out twice, and the audit counts the run it may have had (a job that never ran then
    shows one attempt more than its runs). Only where deliveries may have happened: a
    loss this reconciler saw happen (``witnessed``: a known epoch vanished), or rows
    showing workers delivering before the data set began: a running row, or a delivery
    recorded within ``window_s`` before it (a reconciler started after the loss did not
    see it). A Redis that never held the queue (a new deploy, the test helpers' outbox
    flush) handed out no token."""
    active: dict[str, bool] = {}
    for row in rows:
        at = lost_at.get(row.queue)
        seed = seeds.get(row.pk)
        if at is None or seed is None or row.status == JobStatus.RUNNING \
                or max(row.run_at, row.created_at) > at + timedelta(seconds=margin_s):
            continue
        if row.queue not in active:
            active[row.queue] = row.queue in witnessed or Job.objects.filter(
                Q(status=JobStatus.RUNNING) | Q(updated_at__gte=at - timedelta(seconds=window_s)),
                queue=row.queue, attempts__gt=0, updated_at__lt=at).exists()
        if active[row.queue]:
            seeds[row.pk] = max(seed, row.attempts + 1)


def record_charges(rows: Sequence[Job], seeds: Mapping[str, int | None], lost: bool) -> int:
    """Write into the audit what a re-enqueue is about to count, before it counts it: a
    scheduled or retrying row seeded above its attempts gets those attempts (a
    ``JobAttempt`` each), and in a loss pass a running row, whose lease went with the
    data, becomes ``retrying`` with its attempt's ``JobAttempt``, as a lost lease does. A
    later re-enqueue (another loss before the job's next run is recorded) then seeds from
    the attempts counted here, never below them. Conditional on the row's status and
    attempts being as read (a worker's flush, or another reconciler, wins); one UPDATE
    per (status, attempts, seed) group. Returns how many rows were written."""
    groups: dict[tuple[str, int, int], list[str]] = {}
    for row in rows:
        seed = seeds.get(row.pk) or 0
        if row.status != JobStatus.RUNNING and seed > row.attempts:
            groups.setdefault((row.status, row.attempts, seed), []).append(row.pk)
        elif row.status == JobStatus.RUNNING and lost and row.attempts > 0:
            groups.setdefault((row.status, row.attempts, row.attempts), []).append(row.pk)
    using, now, attempts = router.db_for_write(Job), timezone.now(), []
    lease_lost = type_path(LeaseLost)
    with transaction.atomic(using=using):
        for (status, had, seed), ids in groups.items():
            running = status == JobStatus.RUNNING
            put_back = {"status": JobStatus.RETRYING, "last_error": LOST_WITH_DATA,
                        "error_type": lease_lost, "traceback": ""} if running else {}
            jobs = Job.objects.using(using)
            if not jobs.filter(pk__in=ids, status=status, attempts=had).update(
                    attempts=seed, updated_at=now, **put_back):
                continue
            numbers = [had] if running else range(had + 1, seed + 1)
            attempts += [JobAttempt(job_id=pk, number=n, outcome=JobStatus.RETRYING,
                                    finished_at=now, error_type=lease_lost,
                                    error=LOST_WITH_DATA if running else UNRECORDED)
                         for pk in jobs.filter(pk__in=ids, updated_at=now, attempts=seed)
                         .values_list("pk", flat=True) for n in numbers]
        JobAttempt.objects.using(using).bulk_create(attempts)
    return len({a.job_id for a in attempts})


DEAD_IN_REDIS = "ended dead in Redis; its worker stopped before recording it"
WORKER_LOST = type_path(WorkerLost)  # the error_type of such a row: its own error is lost
CANCELLED_IN_REDIS = "cancelled while it ran; its worker stopped before recording the end"
SUCCEEDED_IN_REDIS = "succeeded; its worker stopped before recording it (its result was not kept)"
EXPIRED_IN_REDIS = "expired before it ran; its worker stopped before recording it"
SETTLED_KEEP_MS = 24 * 3600 * 1000  # settled records older than this are dropped
FROM_RECORD = {"s": (JobStatus.SUCCEEDED, SUCCEEDED_IN_REDIS),
                "x": (JobStatus.EXPIRED, EXPIRED_IN_REDIS),
                "c": (JobStatus.CANCELLED, CANCELLED_IN_REDIS)}


@dataclass(frozen=True, slots=True)
class Finding:
    """A live row whose job Redis does not hold (``dead`` False) or holds as dead, and
    where Redis holds it."""

    row: Job
    place: Presence

    @property
    def dead(self) -> bool:  # a settled record (a worker settled it; its audit row has not
        # landed) tells more
        return self.place.dead and self.place.settled is None

    @property
    def owner(self) -> str:
        """The worker whose audit flush may still write this row ("" when none): the one
        that settled the job in Redis, else the one a running row names."""
        if self.place.settled is not None:
            return self.place.settled.holder
        return self.row.worker_id if self.row.status == JobStatus.RUNNING else ""

    @property
    def settles(self) -> bool:
        """Final in Redis: the row is settled, the job not run again."""
        return self.dead or self.place.settled is not None or (
            self.row.status == JobStatus.RUNNING and self.row.cancel_requested)


def settle(found: list[Finding], engine: Engine) -> int:
    """Rows of jobs final in Redis become final too: dead (with a ``JobAttempt``),
    cancelled, or as their settled record says. Conditional on the row being unchanged
    since it was read; returns how many were settled. The settled records of the rows
    written go (through ``engine``)."""
    count = sum(settle_one(f) for f in found)
    recorded = by_queue([f.row for f in found if f.place.settled is not None])
    for queue, rows in recorded.items():  # the rows say it now
        engine.forget_settled(queue, [r.pk for r in rows], keep_ms=SETTLED_KEEP_MS)
    return count


def settle_one(f: Finding) -> bool:
    """Settle one row; False when the row changed meanwhile (a late flush wins)."""
    if f.dead:
        died = datetime.fromtimestamp(f.place.died_ms / 1000, UTC) if f.place.died_ms else None
        return settle_row(f.row, JobStatus.DEAD, max(f.row.attempts, f.place.attempts, 1),
                          DEAD_IN_REDIS, error_type=WORKER_LOST, finished=died)
    if (settled := f.place.settled) is None:  # cancelled while it ran, its job gone
        return settle_row(f.row, JobStatus.CANCELLED, f.row.attempts, CANCELLED_IN_REDIS)
    status, reason = FROM_RECORD[settled.code]
    expired = status == JobStatus.EXPIRED  # the attempt it was claimed for never started
    number = max(settled.attempt - 1 if expired else settled.attempt, f.row.attempts)
    return settle_row(f.row, status, number, reason, worker_id=settled.holder,
                      finished=datetime.fromtimestamp(settled.at_ms / 1000, UTC))


def settle_row(row: Job, status: JobStatus, number: int, reason: str, *, error_type: str = "",
               worker_id: str | None = None, finished: datetime | None = None,
               unchanged: dict[str, Any] | None = None) -> bool:
    """``row`` ended by the reconciler (``settle_one``, ``unqueueable``) if unchanged since it
    was read (else False: a late flush wins): ``status`` at attempt ``number`` (dead: with a
    ``JobAttempt``), ``worker_id`` None: the row's, ``finished`` None: now; logged, signalled.
    ``unchanged``: what "unchanged" compares besides the status (None: the change time, and
    attempts at most ``number``; ``unqueueable`` passes less for a row whose value is bad)."""
    now, using = timezone.now(), router.db_for_write(Job)
    finished = now if finished is None else db_datetime(finished)  # Redis's instants: UTC
    worker_id = row.worker_id if worker_id is None else worker_id
    if unchanged is None:
        unchanged = {"updated_at": row.updated_at, "attempts__lte": number}
    with transaction.atomic(using=using):
        if not Job.objects.using(using).filter(pk=row.pk, status=row.status, **unchanged).update(
                status=status, attempts=number, finished_at=finished, last_error=reason,
                error_type=error_type, traceback="", updated_at=now, worker_id=worker_id):
            return False
        if status == JobStatus.DEAD:
            JobAttempt.objects.using(using).create(job_id=row.pk, number=number, outcome=status,
                                                   finished_at=finished, error_type=error_type,
                                                   error=reason)
        workflows.resolve([row.pk], using)  # its waiting children follow in this transaction
    logger.warning("reconciler: job %s (queue %s): %s (row said %s, attempt %d); row settled %s",
                   shown(row.pk), shown(row.queue), reason, shown(row.status), number, status)
    base = {"job_id": row.pk, "queue": row.queue, "callable_path": row.callable_path}
    if status == JobStatus.SUCCEEDED:
        signals.send(signals.job_succeeded, attempt=number, worker_id=worker_id, result=None,
                     duration=None, **base)
    elif status == JobStatus.EXPIRED:  # as its worker would have sent it; due: the row's
        expires = row.expires_at
        signals.send(signals.job_expired, attempts=number, worker_id=worker_id,
                     due_at=aware_datetime(row.run_at),
                     expires_at=None if expires is None else aware_datetime(expires), **base)
    elif status == JobStatus.DEAD:
        signals.send(signals.job_dead, attempt=number, worker_id="", error=reason,
                     error_type=error_type, started_at=None, **base)  # as its JobAttempt
    elif status == JobStatus.CANCELLED:
        signals.send(signals.job_cancelled, running=True, **base)
    return True
