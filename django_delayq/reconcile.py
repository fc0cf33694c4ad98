"""The outbox reconciler: audit rows that should be in Redis but are not get enqueued.

The row is the durable record. A row in a live status (scheduled, retrying, running)
whose job is in none of the queue's sets in Redis was never enqueued (Redis was down at commit) or
was lost (Redis restarted without persistence, FLUSHALL, eviction).

Two modes, both bounded per call:

* **Incremental** (``tick()`` every ``RECONCILE_INTERVAL_SECONDS``): walks live rows in
  keyset-paginated batches on the ``(status, run_at)`` index, at most
  ``BATCHES_PER_TICK`` batches of ``BATCH`` rows per tick, one query and one MULTI
  round trip per queue and batch. Rows changed within ``RECONCILE_GRACE_SECONDS`` are
  skipped: their on-commit enqueue or their audit flush may still be on its way.
* **Urgent** (data loss detected): every queue carries an epoch key
  ``{prefix:queue}:epoch`` holding a random token. It lives in the queue's hash slot,
  so it disappears together with the queue's data (FLUSHALL, a restart without
  persistence, a failover to an empty replica). ``tick()`` reads it every
  ``EPOCH_CHECK_SECONDS``; a reconciler that finds it gone (and creates a new one) or
  changed (another worker re-created it) gives the queue a full pass with **no
  grace** (on a first look, with no epoch at all, rows changed in the last
  ``URGENT_GRACE_SECONDS`` are left to the normal walk: they may be jobs acked in this
  Redis whose audit flush is still on its way), run at most ``URGENT_BUDGET_SECONDS``
  (and a quarter of the lease) per tick until done, so heartbeats keep flowing.

The acked-but-not-yet-audited trade-off
---------------------------------------
A job acked in Redis is gone from Redis; until its worker flushes the audit row, the row
still says ``running`` (or even ``scheduled``). Re-enqueueing it would run it twice.
So a ``running`` row missing from Redis is re-enqueued only when

1. Redis lost its data (epoch gone): the ack of the running copy will be refused
   anyway (its lease vanished), so the row would stay ``running`` forever; or
2. the worker named on the row is no longer alive (absent from the workers registry
   or silent for ``2 * LEASE_SECONDS``): its audit buffer died with it, so nobody will
   ever finish the row; we cannot tell "ran and acked" from "lost", and at-least-once
   means we run it again. This is a duplicate of a job that was in flight at a crash.

While its worker lives, such a row is left alone (its flush is coming). A ``scheduled``
or ``retrying`` row missing from Redis past the grace period is re-enqueued: its enqueue
never happened, or a worker ran it and died before flushing even the ``running`` state
(again a job in flight at a crash).

The grace period is measured on the row's ``updated_at``, which says nothing about when
the job left Redis: a fast job settled right now (say, a backlog of acks sent the
moment Redis came back) leaves a ``scheduled`` row with an old ``updated_at`` and no
job in Redis for the few milliseconds until the audit flush. So, outside data loss, a row
found missing is only a *suspect*; it is re-enqueued when a second look, at least
``confirm_seconds`` later (``max(1 s, 20 * AUDIT_FLUSH_SECONDS)``), finds the row
unchanged and the job still absent.

Several workers reconcile the same rows. When one re-enqueues a job, it first records
the id in ``{prefix:queue}:reconciled`` (ZSET id -> server ms, kept ``RECENT_SECONDS``,
at most ``MAX_RECENT`` ids); the others' second look skips ids found there (read in
the same MULTI as the job's place), or they would re-enqueue a job that a third worker
has just run and acked but not yet audited. The no-grace pass skips them too: the
ZSET is lost with the data, so whatever it holds was re-enqueued after the loss. An
epoch change clears the suspects.

Re-enqueue is idempotent (``enqueue.lua`` skips ids already pending, in flight or dead), so running
several reconcilers at once never doubles a job. The attempts counter is seeded with
the row's ``attempts`` (HSETNX) in the same MULTI: the next delivery gets a new, higher
lease token, so a late ack of a copy that ran when Redis lost its data cannot settle the
redelivered copy, and attempts keep counting across the loss.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, close_old_connections
from django.db.models import Q
from django.utils import timezone

from django_delayq.conf import Settings
from django_delayq.engine import Engine, scripts
from django_delayq.models import LIVE_STATUSES, Job, JobStatus

logger = logging.getLogger(__name__)

BATCH = scripts.RECONCILE_CHUNK  # rows per query and per MULTI: bounded time in Redis
BATCHES_PER_TICK = 4
MAX_SUSPECTS = 10_000
RECENT_SECONDS = 30.0
MAX_RECENT = 100_000
LIGHT = ("id", "queue", "status", "worker_id", "run_at", "updated_at", "attempts")
EPOCH_CHECK_SECONDS = 1.0
URGENT_BUDGET_SECONDS = 2.0  # at most; never more than a quarter of the lease
# On a *first look* (no epoch yet: a new install, or a loss nobody saw) the urgent pass
# skips rows changed in the last URGENT_GRACE_SECONDS: such a row most likely describes a
# job that is in this Redis and was already acked while its audit flush is on its way.
# The normal walk (grace + second look) takes those rows. An observed loss gets no grace.
URGENT_GRACE_SECONDS = 2.0


def _s(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(slots=True)
class Cursor:
    """Position of a walk over live rows: status index, then (run_at, pk)."""

    status: int = 0
    after: tuple[datetime, str] | None = None


@dataclass(frozen=True, slots=True)
class Suspect:
    status: str
    updated_at: datetime
    seen: float


@dataclass(slots=True)
class PassStats:
    examined: int = 0
    enqueued: int = 0
    orphans: int = 0
    waiting_on_live_worker: int = 0
    missing: list[str] = field(default_factory=list)


class Reconciler:
    def __init__(self, engine: Engine, settings: Settings, queues: tuple[str, ...]) -> None:
        self.engine = engine
        self.settings = settings
        self.queues = tuple(queues)
        self._cursor = Cursor()
        self._urgent: dict[str, Cursor] = {}
        self._epochs: dict[str, str] = {}
        self._suspects: dict[str, Suspect] = {}
        self.confirm_seconds = max(1.0, 20 * settings.audit_flush_seconds)
        self._last = -1e18
        self._last_epoch = -1e18
        self.stats = PassStats()
        self._first_look: set[str] = set()

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
                grace = min(URGENT_GRACE_SECONDS, self.settings.reconcile_grace_seconds) \
                    if queue in self._first_look else 0.0
                added += self._batch(cursor, (queue,), grace, lost=True)
                if cursor.status == 0 and cursor.after is None:
                    del self._urgent[queue]
                    self._first_look.discard(queue)
                    logger.info("reconciler: full pass of queue %r without grace done", queue)
                    break
        return added

    # -- on demand (manage.py delayq_reconcile) ---------------------------------------

    def run_all(self, batch: int = BATCH, grace_seconds: float | None = None, *,
                assume_lost: bool = False, dry_run: bool = False) -> int:
        """Walk every live row once; with data loss (detected or assumed), no grace."""
        lost = set(self.check_epochs()) | (set(self.queues) if assume_lost else set())
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
            time.sleep(self.confirm_seconds)
            while self._suspects:
                total += self._confirm(force=True)
        return total

    # -- epoch: did Redis lose this queue's data? -------------------------------------

    def epoch_key(self, queue: str) -> str:
        return self.engine.keys(queue).tag + ":epoch"

    def check_epochs(self) -> list[str]:
        """Queues whose epoch key vanished, or changed since we last looked.

        Every reconciler that notices runs the no-grace pass (if only the one that
        re-created the key did, its death mid-pass would strand rows); they do not
        double jobs because each skips ids another one re-enqueued (``reconciled``).
        """
        pipe = self.engine.client.pipeline(transaction=False)
        for queue in self.queues:
            pipe.get(self.epoch_key(queue))
        lost = []
        for queue, raw in zip(self.queues, pipe.execute()):
            value = _s(raw)
            known = self._epochs.get(queue)
            if value is None:
                value = self._new_epoch(queue)
            if value != known and (known is not None or raw is None):
                lost.append(queue)
                self._log_loss(queue, known)
                if known is None:
                    self._first_look.add(queue)
                else:
                    self._first_look.discard(queue)
                self._suspects.clear()  # whatever they were, the no-grace pass decides now
            self._epochs[queue] = value
        return lost

    def _log_loss(self, queue: str, known: str | None) -> None:
        if known is None:  # first look: a new install, or lost while nobody watched
            logger.info("reconciler: queue %r has no epoch key yet; full pass without grace",
                        queue)
        else:
            logger.warning("reconciler: queue %r lost its Redis data (epoch key gone); "
                           "re-enqueueing its live rows without grace", queue)

    def _new_epoch(self, queue: str) -> str:
        token = uuid.uuid4().hex
        key = self.epoch_key(queue)
        if self.engine.client.set(key, token, nx=True):
            return token
        return _s(self.engine.client.get(key)) or token

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
        missing = self._missing(rows, lost)
        if dry_run:
            self.stats.missing += [r.pk for r in missing]
            return len(missing)
        if lost:
            return self._enqueue(missing)
        now = time.monotonic()
        for row in missing:
            if len(self._suspects) < MAX_SUSPECTS:
                self._suspects.setdefault(row.pk, Suspect(row.status, row.updated_at, now))
        return 0

    def _confirm(self, force: bool = False) -> int:
        """Second look at suspects: re-enqueue those whose row did not move meanwhile."""
        horizon = time.monotonic() - self.confirm_seconds
        due = [pk for pk, sus in self._suspects.items() if force or sus.seen <= horizon][:BATCH]
        if not due:
            return 0
        rows = {r.pk: r for r in Job.objects.filter(pk__in=due, status__in=LIVE_STATUSES)
                .only(*LIGHT)}
        still = []
        for pk in due:
            sus, row = self._suspects.pop(pk), rows.get(pk)
            if row is not None and (row.status, row.updated_at) == (sus.status, sus.updated_at):
                still.append(row)
        return self._enqueue(self._missing(still, lost=False)) if still else 0

    def _missing(self, rows: list[Job], lost: bool) -> list[Job]:
        """Rows whose job Redis does not hold and that should be enqueued again."""
        by_queue: dict[str, list[Job]] = {}
        for row in rows:
            by_queue.setdefault(row.queue, []).append(row)
        absent: list[Job] = []
        for queue, items in by_queue.items():
            absent += self._absent_in(queue, items)
        running = [r for r in absent if r.status == JobStatus.RUNNING]
        if lost or not running:
            return absent
        alive = self._alive_workers({r.worker_id for r in running})
        keep = [r for r in absent if r.status != JobStatus.RUNNING or r.worker_id not in alive]
        waiting = len(absent) - len(keep)
        if waiting:
            self.stats.waiting_on_live_worker += waiting
            logger.debug("reconciler: %d running row(s) missing from Redis left to their live "
                         "worker (audit flush pending)", waiting)
        return keep

    def recent_key(self, queue: str) -> str:
        return self.engine.keys(queue).tag + ":reconciled"

    def _absent_in(self, queue: str, rows: list[Job]) -> list[Job]:
        """Read each row's ZSET membership (and any envelope) atomically (MULTI, one slot;
        no TIME inside: a Redis Cluster pipeline refuses keyless commands)."""
        k = self.engine.keys(queue)
        horizon = self.engine.time_ms() - RECENT_SECONDS * 1000
        pipe = self.engine.client.pipeline(transaction=True)
        for row in rows:
            pipe.hexists(k.jobs, row.pk)
            pipe.zscore(k.pending, row.pk)
            pipe.zscore(k.inflight, row.pk)
            pipe.zscore(k.dead, row.pk)
            pipe.zscore(self.recent_key(queue), row.pk)
        replies = pipe.execute()
        absent = []
        for i, row in enumerate(rows):
            has_env, *places, recent = replies[5 * i:5 * i + 5]
            held = any(p is not None for p in places)
            if not held and not has_env and recent is not None and recent >= horizon:
                logger.debug("reconciler: job %s was re-enqueued moments ago", row.pk)
            elif not held and not has_env:
                absent.append(row)
            elif not held:
                self.stats.orphans += 1
                logger.error("reconciler: job %s has an envelope but is in no queue set of "
                             "%r (partial data loss or eviction?); it cannot run until "
                             "repaired", row.pk, queue)
        return absent

    def _alive_workers(self, worker_ids: set[str]) -> set[str]:
        ids = sorted(w for w in worker_ids if w)
        if not ids:
            return set()
        scores = self.engine.client.zmscore("{%s}:workers" % self.settings.prefix, ids)
        horizon = self.engine.time_ms() - 2 * self.settings.lease_ms
        return {w for w, score in zip(ids, scores) if score is not None and score >= horizon}

    def _enqueue(self, rows: list[Job]) -> int:
        by_queue: dict[str, list[Job]] = {}
        for row in rows:
            by_queue.setdefault(row.queue, []).append(row)
        added = 0
        for queue, items in by_queue.items():
            added += self._enqueue_queue(queue, items)
        if added:
            self.stats.enqueued += added
            logger.warning("reconciler re-enqueued %d job(s) missing from Redis: %s", added,
                           ", ".join("%s (%s%s)" % (r.pk, r.status, " on %s" % r.worker_id
                                                     if r.worker_id else "") for r in rows[:5]))
        return added

    def _enqueue_queue(self, queue: str, rows: list[Job]) -> int:
        """One MULTI: remember the ids, seed their attempts, run enqueue.lua.

        Atomic, so a reconciler killed half-way never leaves ids "remembered" but not
        enqueued (the others would skip them for ``RECENT_SECONDS``). The next delivery
        gets token attempts + 1: a fresh lease token, and attempts keep counting.
        enqueue.lua is sent with EVAL (a NOSCRIPT inside EXEC would not undo the rest).
        """
        k = self.engine.keys(queue)
        recent = self.recent_key(queue)
        now_ms = self.engine.time_ms()
        args: list[Any] = [0, k.channel]
        for row in rows:
            args += [row.pk, int(row.run_at.timestamp() * 1000), 0, ""]  # payload: the row
        pipe = self.engine.client.pipeline(transaction=True)
        pipe.zadd(recent, {row.pk: now_ms for row in rows})
        pipe.zremrangebyscore(recent, "-inf", now_ms - RECENT_SECONDS * 1000)
        pipe.zremrangebyrank(recent, 0, -MAX_RECENT - 1)
        for row in rows:
            if row.attempts > 0:
                pipe.hsetnx(k.attempts, row.pk, row.attempts)
        scripts.load("enqueue").queue(pipe, (k.pending, k.jobs, k.inflight, k.dead), args)
        return int(pipe.execute()[-1][0])

