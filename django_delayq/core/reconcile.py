"""The outbox reconciler: audit rows that should be in Redis but are not get enqueued.

The row is the durable record. A row in a live status (scheduled, retrying, running)
whose job is in none of the queue's sets in Redis was never enqueued (Redis was down at
commit), was lost (Redis restarted without persistence, FLUSHALL, eviction), or was
finished in Redis by a worker whose audit flush has not landed (yet, or ever: the worker
died). A live row whose job sits in the dead set ended dead in Redis; its worker stopped
before recording it.

Two modes, both bounded per call:

* **Incremental** (``tick()`` every ``RECONCILE_INTERVAL_SECONDS``): walks live rows in
  keyset-paginated batches on the ``(status, run_at)`` index, at most
  ``BATCHES_PER_TICK`` batches of ``BATCH`` rows per tick, one query per batch and one
  MULTI round trip per ``MULTI_ROWS`` rows. Rows changed within
  ``RECONCILE_GRACE_SECONDS`` are skipped: their on-commit enqueue or their audit flush
  may still be on its way.
* **Loss pass** (data loss detected): a full walk of the queue's live rows without
  grace, at most ``URGENT_BUDGET_SECONDS`` (and a quarter of the lease) per tick until
  done, so heartbeats keep flowing.

Telling a data loss from a new Redis: the epoch
-----------------------------------------------
Every queue carries an epoch key ``{prefix:queue}:epoch`` in its own hash slot, so it
disappears together with the queue's data (FLUSHALL, a restart without persistence, a
failover to an empty replica). Its value is ``<created ms>:<token>:<kind>``.

Whoever first writes a queue's jobs creates it: ``enqueue.lua`` sets it (``SET NX``,
kind ``e``) whenever it runs. So a web process that schedules jobs into a brand-new
Redis before the first worker of a deploy starts has created the epoch, and that worker
sees an epoch on its first look: no loss, nothing re-enqueued out of turn. "No epoch"
means no job has been written into this Redis since it was last empty of this queue.

A reconciler that finds no epoch creates it (``SET NX``) after reading whether the queue
holds any data at all (pending, in flight, dead, attempts, envelopes, ``reconciled``):

* none: a Redis that never held this queue, or one that lost it; kind ``L``. Either way
  no job of the queue was ever acked *in this Redis*, so a live row whose job is absent
  cannot be "acked here, audit flush on its way": the loss pass is safe.
* some: only the epoch key went away (evicted, deleted by hand, or written by a version
  whose enqueue does not create it); kind ``K``: not a loss, no pass. Re-enqueueing
  without grace here would re-run jobs acked moments ago whose flush has not landed.

``tick()`` reads the epochs every ``EPOCH_CHECK_SECONDS``:

* epoch present on the first look: remembered, no pass (a restart of every worker, a
  new deploy);
* no epoch on the first look: a pass only when the queue holds nothing (kind ``L``,
  created by this reconciler or, moments ago, by another one);
* the remembered epoch vanished or changed: a loss, unless the new one is of kind ``K``.
  Every reconciler that notices runs the pass (if only the one that re-created the key
  did, its death mid-pass would strand rows); they do not double jobs because each
  skips ids another one re-enqueued (``reconciled``, below).

Even in a loss pass, a row may describe a job written into the *new* data: scheduled
after the loss and already acked there, its flush on its way. The loss is dated by the
new epoch's creation (Redis clock, mapped to this host's clock): a row changed more than
``LOSS_MARGIN_SECONDS`` before it describes the lost data and is re-enqueued at once,
running rows included; a row changed later gets the second look (below) first. The
margin covers clock skew between hosts and an enqueue still on its way at the loss.

The acked-but-not-yet-audited trade-off
---------------------------------------
A job acked in Redis is gone from Redis; until its worker flushes the audit row, the row
still says ``running`` (or even ``scheduled``). Re-enqueueing it would run it twice.
So, outside a loss pass, a row found missing is only a *suspect*: it is acted on when a
second look, at least ``confirm_seconds`` later (``max(1 s, 20 * AUDIT_FLUSH_SECONDS)``),
finds the row unchanged and the job still absent (a live worker's flush held up longer
than that, by a stalled database, is the one delay it cannot wait out: workers do not
publish how far their flushes got). A ``running`` row is left alone while
the worker named on it heartbeats (its flush is coming); once that worker is silent for
``2 * LEASE_SECONDS`` its audit buffer died with it: we cannot tell "ran and acked" from
"lost", and at-least-once means we run it again, a duplicate of a job in flight at a
crash. In a loss pass running rows are re-enqueued even with a live worker: the ack of
the running copy is refused (its lease vanished with the data), so the row would stay
``running`` forever.

Several workers reconcile the same rows. When one re-enqueues a job, it first records
the id in ``{prefix:queue}:reconciled`` (ZSET id -> server ms, kept ``RECENT_SECONDS``,
at most ``MAX_RECENT`` ids); the others skip ids found there (read in the same MULTI as
the job's place), or they would re-enqueue a job that a third worker has just run and
acked but not yet audited. The ZSET is lost with the data, so whatever it holds was
re-enqueued after the loss. An epoch change clears the suspects.

Jobs final in Redis
-------------------
A live row whose id is in the dead set (a final nack or a lease recovery out of
attempts reached Redis; the worker died before its audit flush) is settled ``dead``
after the same second look: attempts from Redis's counter, the reason
``DEAD_IN_REDIS`` and a ``JobAttempt``. A ``running`` row whose cancel was asked and
whose job is gone is settled ``cancelled`` (the cancel forbade another run). Neither is
counted as "held": such a row would otherwise stay live forever. The update is
conditional on the row being unchanged, so a late flush of a live worker wins.

Attempts and lease tokens across a re-enqueue
---------------------------------------------
The attempts counter in Redis is the lease token. A re-enqueue seeds it (HSETNX, in the
same MULTI as enqueue.lua: never lowers a counter Redis holds) so that the next
delivery's token is higher than any token the job may have been given:

* ``running`` row: seeded with the row's attempts (that attempt ran or is lost);
* ``scheduled``/``retrying`` row due by now: a worker may have claimed it, run it and
  died before its first audit write (the row says nothing of that run). That happened
  when a worker active since the row was last written has gone silent (its heartbeat
  is older than ``SILENT_BEATS`` heartbeat periods): the counter is seeded with
  attempts + 1, so the re-run is attempt n + 2, under a token of its own, and the audit
  counts the unrecorded run. While such a worker has been neither heard from since the
  first look nor silent long enough, the decision waits. A row never delivered (the
  outbox: Redis was down at commit) keeps its count: its first run is attempt 1.

``JobAttempt`` numbers are not a further source: they are written in the same
transaction as the row's attempts, and exceed them only after a requeue, which restarts
the count on purpose.

Re-enqueue is idempotent (``enqueue.lua`` skips ids already pending, in flight or dead),
so running several reconcilers at once never doubles a job. enqueue.lua is sent with
EVAL inside the MULTI (a NOSCRIPT inside EXEC would not undo the rest).

Every MULTI carries at most ``MULTI_ROWS`` (``scripts.RECONCILE_CHUNK``, 100) rows: a
MULTI blocks Redis like a script, and 500 rows (six reads each) took ~11 ms, over the
5 ms bound of every Redis call.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError, close_old_connections, router, transaction
from django.db.models import Q
from django.utils import timezone

from django_delayq import signals
from django_delayq.core.conf import Settings
from django_delayq.engine import Engine, scripts
from django_delayq.exceptions import WorkerLost, type_path
from django_delayq.models import LIVE_STATUSES, Job, JobAttempt, JobStatus

logger = logging.getLogger(__name__)

BATCH = 500
BATCHES_PER_TICK = 4
# Rows per MULTI (six reads each, or their re-enqueue): a MULTI blocks Redis like a
# script; 500 rows took ~11 ms, over the 5 ms bound of any Redis call (engine/scripts.py).
MULTI_ROWS = scripts.RECONCILE_CHUNK
MAX_SUSPECTS = 10_000
RECENT_SECONDS = 30.0
MAX_RECENT = 100_000
LIGHT = ("id", "queue", "status", "worker_id", "run_at", "updated_at", "attempts",
         "cancel_requested", "callable_path")
EPOCH_CHECK_SECONDS = 1.0
URGENT_BUDGET_SECONDS = 2.0  # at most; never more than a quarter of the lease
# In a loss pass, rows changed less than this before the loss (or after it) may describe
# jobs written into the new data: they get the second look instead of an instant re-enqueue.
LOSS_MARGIN_SECONDS = 2.0
# A worker whose heartbeat (every LEASE_SECONDS / 3) is this many periods old may be dead.
SILENT_BEATS = 2
# Epoch kinds (the value's last field): who created it, and what it means.
LOST, KEPT, ENQUEUED = "L", "K", "e"
DEAD_IN_REDIS = "ended dead in Redis; its worker stopped before recording it"
WORKER_LOST = type_path(WorkerLost)  # the error_type of such a row: its own error is lost
CANCELLED_IN_REDIS = ("cancelled while it ran; its worker stopped before recording the end")

def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def epoch_kind(value: str | None) -> str:
    """``L``, ``K`` or ``e`` (see the module docstring); "" for an older value."""
    parts = (value or "").split(":")
    return parts[-1] if len(parts) >= 2 else ""


def epoch_created_ms(value: str | None) -> int | None:
    head = (value or "").split(":")[0]
    return int(head) if head.isdigit() else None


@dataclass(slots=True)
class Cursor:
    """Position of a walk over live rows: status index, then (run_at, pk)."""

    status: int = 0
    after: tuple[datetime, str] | None = None


@dataclass(frozen=True, slots=True)
class Suspect:
    status: str
    updated_at: datetime
    seen: float  # monotonic
    seen_ms: int  # Redis clock: workers heard from after this were alive after the look
    lost: bool  # found in a loss pass: a live worker does not keep a running row


@dataclass(frozen=True, slots=True)
class Finding:
    """A live row whose job Redis does not hold (``dead`` False) or holds as dead."""

    row: Job
    dead: bool = False
    redis_attempts: int = 0
    died_ms: int | None = None

    @property
    def settles(self) -> bool:
        """Final in Redis: the row is settled, the job not run again."""
        return self.dead or (self.row.status == JobStatus.RUNNING and self.row.cancel_requested)


@dataclass(frozen=True, slots=True)
class Beats:
    """Last heartbeats (Redis ms) of the workers heard from since some moment."""

    now_ms: int
    beats: tuple[float, ...]
    silent_ms: int

    def silent_since(self, since_ms: int) -> bool:
        """A worker active after ``since_ms`` has gone silent (died, most likely)."""
        return any(since_ms <= b < self.now_ms - self.silent_ms for b in self.beats)

    def heard_after(self, since_ms: int, after_ms: int) -> bool:
        """Every worker active after ``since_ms`` has heartbeated after ``after_ms``."""
        return all(b > after_ms for b in self.beats if b >= since_ms)


@dataclass(slots=True)
class PassStats:
    examined: int = 0
    enqueued: int = 0
    settled: int = 0
    orphans: int = 0
    waiting_on_live_worker: int = 0
    missing: list[str] = field(default_factory=list)
    to_settle: list[str] = field(default_factory=list)


class Reconciler:
    def __init__(self, engine: Engine, settings: Settings, queues: tuple[str, ...]) -> None:
        self.engine = engine
        self.settings = settings
        self.queues = tuple(queues)
        self._cursor = Cursor()
        self._urgent: dict[str, Cursor] = {}
        self._epochs: dict[str, str] = {}
        self._lost_at: dict[str, datetime] = {}
        self._suspects: dict[str, Suspect] = {}
        self.confirm_seconds = max(1.0, 20 * settings.audit_flush_seconds)
        self._last = -1e18
        self._last_epoch = -1e18
        self.stats = PassStats()

    # -- worker entry point -----------------------------------------------------------

    def tick(self) -> int:
        """Cheap unless something is wrong; returns how many jobs were re-enqueued.

        Redis errors propagate (the worker backs off); database errors are logged here.
        """
        try:
            return self._tick()
        except DatabaseError as exc:
            logger.warning("reconciler: database unavailable (%s); will retry", exc)
            close_old_connections()
            return 0

    def _tick(self) -> int:
        now = time.monotonic()
        if now - self._last_epoch >= min(EPOCH_CHECK_SECONDS,
                                         self.settings.reconcile_interval_seconds):
            self._last_epoch = now
            for queue in self.check_epochs():
                self._urgent[queue] = Cursor()
        added = self._urgent_work() if self._urgent else 0
        added += self._confirm()
        if now - self._last >= self.settings.reconcile_interval_seconds:
            self._last = now
            grace = self.settings.reconcile_grace_seconds
            for _ in range(BATCHES_PER_TICK):
                added += self._batch(self._cursor, self.queues, grace, lost=False)
                if self._cursor.status == 0 and self._cursor.after is None:
                    break  # wrapped around: a full cycle is done
        return added

    def _urgent_work(self) -> int:
        budget = min(URGENT_BUDGET_SECONDS, self.settings.lease_seconds / 4)
        deadline = time.monotonic() + budget
        added = 0
        for queue in list(self._urgent):
            cursor = self._urgent[queue]
            while time.monotonic() < deadline:
                added += self._batch(cursor, (queue,), 0.0, lost=True)
                if cursor.status == 0 and cursor.after is None:
                    del self._urgent[queue]
                    logger.info("reconciler: loss pass of queue %r done", queue)
                    break
        return added

    # -- on demand (manage.py delayq_reconcile) ---------------------------------------

    def run_all(self, batch: int = BATCH, grace_seconds: float | None = None, *,
                assume_lost: bool = False, dry_run: bool = False) -> int:
        """Walk every live row once; with data loss (detected or assumed), no grace.

        Suspects get their second look after ``confirm_seconds``; right away when no
        worker is alive (nobody has an audit flush on its way)."""
        lost = set(self.check_epochs(create=not dry_run))
        if assume_lost:
            for queue in set(self.queues) - lost:
                self._lost_at[queue] = timezone.now()
            lost |= set(self.queues)
        grace = self.settings.reconcile_grace_seconds if grace_seconds is None else grace_seconds
        total = 0
        for queue in self.queues:
            cursor = Cursor()
            while True:
                total += self._batch(cursor, (queue,), 0.0 if queue in lost else grace,
                                     lost=queue in lost, batch=batch, dry_run=dry_run)
                if cursor.status == 0 and cursor.after is None:
                    break
        if self._suspects and not dry_run:
            if self._any_worker_alive():
                time.sleep(self.confirm_seconds)
            while self._suspects:
                before = len(self._suspects)
                total += self._confirm(force=True)
                if len(self._suspects) >= before:  # decisions waiting on a silent worker
                    time.sleep(0.5)
        return total

    # -- epoch: did Redis lose this queue's data? -------------------------------------

    def epoch_key(self, queue: str) -> str:
        """Also written by enqueue.lua: the same name on both sides."""
        return self.engine.keys(queue).epoch

    def check_epochs(self, create: bool = True) -> list[str]:
        """Queues whose data Redis lost (see the module docstring): they need a loss pass.

        ``create=False`` (a dry run) writes nothing: a missing epoch stays missing."""
        lost = []
        for queue, found in zip(self.queues, self.engine.epochs(self.queues)):
            known = self._epochs.get(queue)
            value, loss = self._look_at(queue, known, found, create)
            if loss:
                lost.append(queue)
                self._lost_at[queue] = self._dated(value)
                self._log_loss(queue, known)
                self._suspects.clear()  # whatever they were, the loss pass decides now
            if value is not None:
                self._epochs[queue] = value
        return lost

    def _look_at(self, queue: str, known: str | None, value: str | None,
                 create: bool) -> tuple[str | None, bool]:
        """(the epoch to remember, whether the queue's data was lost)."""
        if value is not None:
            if known is None or value == known:
                return value, False  # first look at a kept epoch, or unchanged
            return value, epoch_kind(value) != KEPT  # replaced: the old data is gone
        value = self._create_epoch(queue, write=create)
        kind = epoch_kind(value)
        if kind == KEPT:
            log = logger.info if known is None else logger.warning
            log("reconciler: queue %r had no epoch key but holds data in Redis (evicted or "
                "deleted by hand?); not a data loss, no pass without grace", queue)
        if known is None:
            return value if create else None, kind == LOST
        return value if create else None, kind != KEPT

    def _create_epoch(self, queue: str, write: bool = True) -> str:
        """``SET NX`` a new epoch whose kind says whether the queue held any data; when
        another process created one first, that one."""
        held = self.engine.holds_data(queue)
        value = "%d:%s:%s" % (self.engine.time_ms(), uuid.uuid4().hex[:16],
                              KEPT if held else LOST)
        return self.engine.create_epoch(queue, value) if write else value

    def _dated(self, value: str | None) -> datetime:
        """When the loss was recorded (the new epoch's creation), on this host's clock."""
        now = timezone.now()
        created = epoch_created_ms(value)
        if created is None:
            return now
        age_ms = self.engine.time_ms() - created
        return now - timedelta(milliseconds=age_ms) if age_ms >= 0 else now

    def _log_loss(self, queue: str, known: str | None) -> None:
        if known is None:  # first look: a new Redis, or one lost while nobody watched
            logger.info("reconciler: queue %r has no epoch key and no data in Redis; "
                        "full pass without grace", queue)
        else:
            logger.warning("reconciler: queue %r lost its Redis data (epoch key gone); "
                           "re-enqueueing its live rows without grace", queue)

    # -- one batch ----------------------------------------------------------------------

    def _rows(self, cursor: Cursor, queues: tuple[str, ...], grace: float,
              batch: int) -> list[Job]:
        """Up to ``batch`` live rows from ``cursor``; advances it (wraps to the start)."""
        cutoff = timezone.now() - timedelta(seconds=grace)
        while cursor.status < len(LIVE_STATUSES):
            rows = Job.objects.filter(status=LIVE_STATUSES[cursor.status], queue__in=queues,
                                      updated_at__lte=cutoff).only(*LIGHT)
            if cursor.after is not None:
                at, pk = cursor.after
                rows = rows.filter(Q(run_at__gt=at) | Q(run_at=at, pk__gt=pk))
            found = list(rows.order_by("run_at", "pk")[:batch])
            if len(found) == batch:
                cursor.after = (found[-1].run_at, found[-1].pk)
            else:
                cursor.status, cursor.after = cursor.status + 1, None
            if found:
                return found
        cursor.status, cursor.after = 0, None
        return []

    def _batch(self, cursor: Cursor, queues: tuple[str, ...], grace: float, *, lost: bool,
               batch: int = BATCH, dry_run: bool = False) -> int:
        rows = self._rows(cursor, queues, grace, batch)
        if not rows:
            return 0
        self.stats.examined += len(rows)
        seen_ms = self.engine.time_ms()  # before the look: whoever beats later was alive
        found = self._find(rows)
        if not lost:
            found = self._leave_to_live_workers(found)
        if not found:
            return 0
        if dry_run:
            self.stats.missing += [f.row.pk for f in found if not f.settles]
            self.stats.to_settle += [f.row.pk for f in found if f.settles]
            return sum(not f.settles for f in found)
        now, act = time.monotonic(), []
        for f in found:
            if lost and not f.dead and self._before_loss(f.row):
                act.append(f)
            elif lost or len(self._suspects) < MAX_SUSPECTS:
                self._suspects.setdefault(f.row.pk, Suspect(f.row.status, f.row.updated_at,
                                                            now, seen_ms, lost))
        return self._act(act, None)

    def _before_loss(self, row: Job) -> bool:
        lost_at = self._lost_at.get(row.queue)
        return lost_at is not None and \
            row.updated_at < lost_at - timedelta(seconds=LOSS_MARGIN_SECONDS)

    def _confirm(self, force: bool = False) -> int:
        """Second look at suspects: act on those whose row did not move meanwhile."""
        horizon = time.monotonic() - self.confirm_seconds
        due = [pk for pk, sus in self._suspects.items() if force or sus.seen <= horizon][:BATCH]
        if not due:
            return 0
        rows = {r.pk: r for r in Job.objects.filter(pk__in=due, status__in=LIVE_STATUSES)
                .only(*LIGHT)}
        still: dict[bool, list[Job]] = {False: [], True: []}
        seen: dict[str, Suspect] = {}
        for pk in due:
            sus, row = self._suspects.pop(pk), rows.get(pk)
            if row is not None and (row.status, row.updated_at) == (sus.status, sus.updated_at):
                still[sus.lost].append(row)
                seen[pk] = sus
        added = 0
        for lost, items in still.items():
            if items:
                found = self._find(items)
                added += self._act(found if lost else self._leave_to_live_workers(found), seen)
        return added

    def _act(self, found: list[Finding], seen: dict[str, Suspect] | None) -> int:
        """Settle what is final in Redis; re-enqueue the rest (``seen``: their first look)."""
        self._settle([f for f in found if f.settles])
        return self._enqueue([f.row for f in found if not f.settles], seen)

    # -- where the jobs are -------------------------------------------------------------

    def recent_key(self, queue: str) -> str:
        return self.engine.keys(queue).reconciled

    def _find(self, rows: list[Job]) -> list[Finding]:
        """Rows whose job Redis does not hold, or holds as dead."""
        by_queue: dict[str, list[Job]] = {}
        for row in rows:
            by_queue.setdefault(row.queue, []).append(row)
        found: list[Finding] = []
        for queue, items in by_queue.items():
            horizon = self.engine.time_ms() - RECENT_SECONDS * 1000
            found += self._find_in(queue, items, horizon)
        return found

    def _find_in(self, queue: str, rows: Sequence[Job], horizon: float) -> list[Finding]:
        """Each row's place, envelope and attempts (read atomically, ``MULTI_ROWS`` rows
        per MULTI: ``Engine.presence``)."""
        found = []
        places = self.engine.presence(queue, [row.pk for row in rows])
        for row, place in zip(rows, places):
            if place.queued:
                continue
            if place.dead:
                found.append(Finding(row, dead=True, redis_attempts=place.attempts,
                                     died_ms=place.died_ms))
            elif place.envelope:
                self.stats.orphans += 1
                logger.error("reconciler: job %s has an envelope but is in no queue set of "
                             "%r (partial data loss or eviction?); it cannot run until "
                             "repaired", row.pk, queue)
            elif place.reconciled_ms is not None and place.reconciled_ms >= horizon:
                logger.debug("reconciler: job %s was re-enqueued moments ago", row.pk)
            else:
                found.append(Finding(row, redis_attempts=place.attempts))
        return found

    def _leave_to_live_workers(self, found: list[Finding]) -> list[Finding]:
        """Without a loss, a running row whose worker heartbeats is that worker's: its
        audit flush is on its way."""
        running = [f for f in found if f.row.status == JobStatus.RUNNING]
        if not running:
            return found
        alive = self._alive_workers({f.row.worker_id for f in running})
        keep = [f for f in found
                if f.row.status != JobStatus.RUNNING or f.row.worker_id not in alive]
        waiting = len(found) - len(keep)
        if waiting:
            self.stats.waiting_on_live_worker += waiting
            logger.debug("reconciler: %d running row(s) missing from Redis left to their live "
                         "worker (audit flush pending)", waiting)
        return keep

    # -- workers ------------------------------------------------------------------------

    def _alive_workers(self, worker_ids: set[str]) -> set[str]:
        ids = sorted(w for w in worker_ids if w)
        if not ids:
            return set()
        scores = self.engine.worker_beats(ids)
        horizon = self.engine.time_ms() - 2 * self.settings.lease_ms
        return {w for w, score in zip(ids, scores) if score is not None and score >= horizon}

    @property
    def _silent_ms(self) -> int:
        return SILENT_BEATS * self.settings.lease_ms // 3

    def _any_worker_alive(self) -> bool:
        now = self.engine.time_ms()
        return bool(self.engine.count_workers(now - self._silent_ms))

    def _beats(self, since_ms: int) -> Beats:
        now = self.engine.time_ms()
        return Beats(now, tuple(self.engine.beats_since(since_ms)), self._silent_ms)

    # -- acting -------------------------------------------------------------------------

    def _settle(self, found: list[Finding]) -> None:
        """Rows of jobs final in Redis become final too: dead (with a ``JobAttempt``) or
        cancelled. Conditional on the row being unchanged since it was read."""
        for f in found:
            if self._settle_one(f):
                self.stats.settled += 1

    def _settle_one(self, f: Finding) -> bool:
        row, now = f.row, timezone.now()
        if f.dead:
            status, reason, number = JobStatus.DEAD, DEAD_IN_REDIS, max(row.attempts,
                                                                         f.redis_attempts, 1)
            finished = datetime.fromtimestamp(f.died_ms / 1000, UTC) if f.died_ms else now
        else:
            status, reason, number, finished = (JobStatus.CANCELLED, CANCELLED_IN_REDIS,
                                                row.attempts, now)
        using = router.db_for_write(Job)
        with transaction.atomic(using=using):
            changed = Job.objects.using(using).filter(
                pk=row.pk, status=row.status, updated_at=row.updated_at,
                attempts__lte=number).update(status=status, attempts=number,
                                             finished_at=finished, last_error=reason,
                                             error_type=WORKER_LOST if f.dead else "",
                                             traceback="", updated_at=now)
            if changed and status == JobStatus.DEAD:
                JobAttempt.objects.using(using).create(job_id=row.pk, number=number,
                                                       outcome=status, finished_at=finished,
                                                       error_type=WORKER_LOST, error=reason)
        if not changed:
            return False
        logger.warning("reconciler: job %s %s (row said %s, attempt %d); row settled %s",
                       row.pk, reason, row.status, number, status)
        base = dict(job_id=row.pk, queue=row.queue, callable_path=row.callable_path)
        if status == JobStatus.DEAD:
            signals.send(signals.job_dead, attempt=number, worker_id="", error=reason,
                         error_type=WORKER_LOST, **base)
        else:
            signals.send(signals.job_cancelled, running=True, **base)
        return True

    def _seeds(self, rows: list[Job], seen: dict[str, Suspect] | None) -> dict[str, int | None]:
        """The attempts counter each re-enqueued job starts from (None: decide later).

        A scheduled or retrying row due by now may describe a job a worker ran and died
        before recording: counted (+1) when a worker active since the row was written has
        gone silent; not counted when every such worker was heard from after the first
        look (its flush would have changed the row); undecided otherwise."""
        seeds: dict[str, int | None] = {r.pk: r.attempts for r in rows}
        now = timezone.now()
        due = [r for r in rows if r.status != JobStatus.RUNNING
               and r.run_at <= now + timedelta(seconds=LOSS_MARGIN_SECONDS)]
        if not due:
            return seeds
        offset_ms = self.engine.time_ms() - _ms(now)  # Redis clock - this host's clock

        def since(row: Job) -> int:  # a worker that delivered it was alive after this
            return _ms(max(row.updated_at, row.run_at)) + offset_ms - self.settings.lease_ms

        beats = self._beats(min(since(r) for r in due))
        for row in due:
            sus = seen.get(row.pk) if seen else None
            if beats.silent_since(since(row)):
                seeds[row.pk] = row.attempts + 1
            elif sus is not None and not beats.heard_after(since(row), sus.seen_ms):
                seeds[row.pk] = None
        return seeds

    def _enqueue(self, rows: list[Job], seen: dict[str, Suspect] | None) -> int:
        if not rows:
            return 0
        seeds = self._seeds(rows, seen)
        ready = []
        for row in rows:
            if seeds[row.pk] is None and seen:  # a worker may be dead or just quiet:
                self._suspects.setdefault(row.pk, seen[row.pk])  # look again next time
            else:
                ready.append(row)
        by_queue: dict[str, list[Job]] = {}
        for row in ready:
            by_queue.setdefault(row.queue, []).append(row)
        added = 0
        for queue, items in by_queue.items():
            added += self._enqueue_queue(queue, items, seeds)
        if added:
            self.stats.enqueued += added
            logger.warning("reconciler re-enqueued %d job(s) missing from Redis: %s", added,
                           ", ".join("%s (%s%s, next attempt %d)" % (
                               r.pk, r.status, " on %s" % r.worker_id if r.worker_id else "",
                               (seeds[r.pk] or 0) + 1) for r in ready[:5]))
        return added

    def _enqueue_queue(self, queue: str, rows: Sequence[Job],
                       seeds: dict[str, int | None]) -> int:
        """Per MULTI of ``MULTI_ROWS`` rows: remember the ids, seed their attempts, run
        enqueue.lua (``Engine.reenqueue``).

        Atomic, so a reconciler killed half-way never leaves ids "remembered" but not
        enqueued (the others would skip them for ``RECENT_SECONDS``). HSETNX: a counter
        Redis already holds (the job was claimed meanwhile) is never lowered.
        """
        jobs = [(row.pk, _ms(row.run_at)) for row in rows]  # payload: the row
        return self.engine.reenqueue(queue, jobs, seeds, keep_ms=RECENT_SECONDS * 1000,
                                     keep_max=MAX_RECENT)
