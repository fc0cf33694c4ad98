"""The outbox reconciler: audit rows that should be in Redis but are not get enqueued.

The row is the durable record. A live row (scheduled, retrying, running) whose job is in
none of the queue's sets in Redis was never enqueued (Redis down at commit), was lost
(restart without persistence, FLUSHALL, eviction), or was finished by a worker whose
audit flush has not landed (yet, or ever: the worker died). A live row whose job is in
the dead set ended dead in Redis; its worker stopped before recording it.

Two modes, both bounded per call:

* **Incremental** (``tick()`` every ``RECONCILE_INTERVAL_SECONDS``): walks live rows in
  keyset-paginated batches on the ``(status, run_at)`` index, at most
  ``BATCHES_PER_TICK`` batches of ``BATCH`` rows per tick, one query per batch and one
  MULTI round trip per ``MULTI_ROWS`` rows. Rows changed within
  ``RECONCILE_GRACE_SECONDS`` are skipped: their on-commit enqueue or their audit flush
  may still be on its way.
* **Loss pass** (data loss detected): a full walk of the queue's live rows without
  grace, at most ``URGENT_BUDGET_SECONDS`` (and a quarter of the lease) per tick, ticked
  again at once until done (``busy``), so heartbeats and the schedules' pass keep flowing.
  The loss passes share that budget (a queue lost again starts its pass over, behind the
  others); the pass after an outage has a budget of its own, so neither waits for the
  other to finish.

Telling a data loss from a new Redis: the epoch
-----------------------------------------------
Every queue carries an epoch key that disappears together with the queue's data;
``core/epochs.py`` tells how it is written and read, and when a change of it means a
loss. ``tick()`` reads the epochs every ``EPOCH_CHECK_SECONDS``. Every reconciler that
notices a loss runs the pass (if only the one that re-created the key did, its death
mid-pass would strand rows); they do not double jobs because the re-enqueue skips ids
another one re-enqueued (``reconciled``, below), in the same script.

Even in a loss pass, a row may describe a job written into the *new* data: scheduled
after the loss and already acked there, its flush on its way. The loss is dated by the
new epoch's creation (Redis clock, mapped to this host's clock): a row changed more than
``LOSS_MARGIN_SECONDS`` before it describes the lost data and is re-enqueued at once,
running rows included; a row changed later gets the second look (below) first. The
margin covers clock skew between hosts and an enqueue still on its way at the loss.
A lost queue's pause (its ``QueuePause`` rows, ``core/pauses.py``) is written back
before each batch of its loss pass, which waits while that fails (a paused queue's jobs
never return unpaused); every pause the rows hold is written back at each interval.

The acked-but-not-yet-audited trade-off
---------------------------------------
A job acked in Redis is gone from Redis; until its worker flushes the audit row, the row
still says ``running`` (or even ``scheduled``). Re-enqueueing it would run it twice.
So, outside a loss pass, a row found missing is only a *suspect*: it is acted on when a
second look, at least ``confirm_seconds`` later (``max(1 s, 20 * AUDIT_FLUSH_SECONDS)``),
finds the row unchanged and the job still absent (a live worker's flush held up longer
than that, by a stalled database, is the one delay it cannot wait out: workers do not
publish how far their flushes got). A ``running`` row is left alone while the worker
named on it heartbeats (its flush is coming); once that worker is silent for ``2 *
LEASE_SECONDS`` its audit buffer died with it: we cannot tell "ran and acked" from "lost",
and at-least-once means we run it again, a duplicate of a job in flight at a crash. Such
rows do not wait for the grace (``_look_at_orphans``, every lease), nor do the rows,
whatever they say, of the jobs such a worker settled in Redis
(``core/reconcile_records.py``). In a loss pass running rows are re-enqueued even with a
live worker: the ack of the running copy is refused (its lease vanished with the data), so
the row would stay ``running`` forever.

Several workers reconcile the same rows. When one re-enqueues a job, it records the id
in ``{prefix:queue}:reconciled`` (ZSET id -> server ms, kept ``RECENT_SECONDS``, at most
``MAX_RECENT`` ids), in the script that enqueues it (``reenqueue.lua``), which also
skips ids found there and ids with a settled record: the others would re-enqueue a job
that a third worker has just run and acked but not yet audited (with the check a read
of its own, two loss passes ran jobs twice). The ZSET is lost with the data, so
whatever it holds was re-enqueued after the loss. An epoch change clears the suspects.

Tokens and attempts after a loss (docs/internals.md, "Lease tokens"): a lost delivery
that may have run unrecorded is counted (``reconcile_state.count_lost_deliveries``, also
by a reconciler that did not see the loss: ``Epochs.began``) and written into the row
before the re-enqueue (``reconcile_state.record_charges``).

Jobs final in Redis (dead there, or cancelled while they ran) get the same second look,
then are settled (``reconcile_state.settle``); who counts as alive:
``reconcile_state.Liveness``.
After a Redis outage the rows changed during it get a look within seconds, and again
until no web process can still be backing off (``core/outage.py``).

Every MULTI (and re-enqueue call) carries at most ``MULTI_ROWS`` (100) rows: a MULTI
blocks Redis like a script; 100 rows (ten reads each) take ~0.4 ms, 500 rows took ~11 ms
(at six reads each), over the 5 ms bound.
"""

from __future__ import annotations

import logging
import math
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import DatabaseError, close_old_connections, router

from django_delayq.core import group_limits, pauses, reconcile_state, unqueueable, workflows
from django_delayq.core.epochs import Epochs
from django_delayq.core.outage import OUTAGE_GRACE_SECONDS, Outage
from django_delayq.core.queues import MAX_RECENT, RECENT_SECONDS
from django_delayq.core.reconcile_records import silent_rows
from django_delayq.core.reconcile_state import BATCH, Cursor, Finding, Liveness, Suspect
from django_delayq.core.validation import at_ms
from django_delayq.engine import Engine, scripts
from django_delayq.engine.logtext import shown
from django_delayq.engine.shard_health import ERRORS
from django_delayq.models import LIVE_STATUSES, Job

if TYPE_CHECKING:
    from collections.abc import Callable

    from django_delayq.core.conf import Settings

logger = logging.getLogger(__name__)

BATCHES_PER_TICK = 4
MULTI_ROWS = scripts.RECONCILE_CHUNK  # rows per MULTI: see the module's last paragraph
MAX_SUSPECTS = 10_000
EPOCH_CHECK_SECONDS = 1.0
URGENT_BUDGET_SECONDS = 0.5  # per tick (a quarter lease at most); ticked again while busy
AFTER_OUTAGE = ""  # the pass after an outage among the urgent walks (no queue is named "")
# In a loss pass, rows changed less than this before the loss (or after it) may describe
# jobs written into the new data: they get the second look instead of an instant re-enqueue.
LOSS_MARGIN_SECONDS = 2.0
# workflows.sweep(): the net for edges whose parent became final without the release hook.
SWEEP_SECONDS = 10.0


class Reconciler:
    def __init__(self, engine: Engine, settings: Settings, queues: tuple[str, ...],
                 failures: Callable[[], int] | None = None) -> None:
        """``failures``: how many Redis calls of the rest of this process found a node
        unreachable so far (the worker's backed off queues), beside its engine's own
        (``ShardHealth.failures``): a sign of an outage this reconciler's looks missed."""
        self.engine, self.settings = engine, settings
        self._live = Liveness(engine, settings)
        self.queues = tuple(queues)
        self._cursor = Cursor(self.queues, settings.reconcile_grace_seconds)
        # walks without the long grace, within the urgent budget: a loss pass by queue,
        # and the passes after an outage (``AFTER_OUTAGE``: rows changed since it began get
        # the second look, ``core/outage.py``)
        self._urgent: dict[str, Cursor] = {}
        self._epochs = Epochs(engine, self.queues)
        self._suspects: dict[str, Suspect] = {}
        self.confirm_seconds = max(1.0, 20 * settings.audit_flush_seconds)
        self._last = self._last_epoch = self._last_orphans = -1e18
        self._last_sweep = time.monotonic()  # the first sweep after one SWEEP_SECONDS
        self.stats = reconcile_state.PassStats()
        # Redis failing, as seen here: passes once it answers
        self._outage = Outage()
        self._failures_of = failures
        self._failures = self._failure_count()

    # -- worker entry point -----------------------------------------------------------

    def tick(self) -> int:
        """Cheap unless something is wrong; returns how many jobs were re-enqueued.

        Redis errors propagate (the worker backs off); database errors are logged here.
        """
        try:
            return self._tick()
        except ERRORS:
            self._outage.failed()
            raise
        except DatabaseError as exc:
            logger.warning("reconciler: database unavailable (%s); will retry", shown(exc))
            close_old_connections()
            return 0

    def _tick(self) -> int:
        now, enqueued = time.monotonic(), self.stats.enqueued
        if now - self._last_epoch >= min(EPOCH_CHECK_SECONDS,
                                         self.settings.reconcile_interval_seconds):
            self._last_epoch = now
            self._look_at_epochs()
        if AFTER_OUTAGE not in self._urgent and (since := self._outage.take_pass()):
            self._urgent[AFTER_OUTAGE] = Cursor(self.queues, OUTAGE_GRACE_SECONDS, since=since)
            self.stats.outage_passes += 1
            (logger.info if self._outage.taken == 1 else logger.debug)(
                "reconciler: Redis answers again; looking at the rows changed since %s "
                "without the long grace (pass %d)", since, self._outage.taken)
        # the loss passes share one urgent budget, then the pass after an outage has one
        # of its own: neither waits for the other to finish
        budget = min(URGENT_BUDGET_SECONDS, self.settings.lease_seconds / 4)
        # a lost queue's pause first (the rows'): none of its jobs is put back unpaused
        unpaused = pauses.restore(self.engine, [q for q, c in self._urgent.items() if c.lost])
        for lost in (True, False):
            deadline = time.monotonic() + budget
            for queue, cursor in [(q, c) for q, c in self._urgent.items() if c.lost is lost
                                  and q not in unpaused]:
                if self._walk(cursor, deadline):
                    del self._urgent[queue]
                    if lost:
                        logger.info("reconciler: loss pass of queue %r done", queue)
                    else:
                        self._outage.done()
        self._confirm()
        if now - self._last_orphans >= self.settings.lease_seconds:
            self._last_orphans = now
            self._look_at_orphans()
        if now - self._last_sweep >= max(SWEEP_SECONDS, self.settings.reconcile_interval_seconds):
            self._last_sweep = now  # children of parents made final without the hook
            workflows.sweep(router.db_for_write(Job))
        if now - self._last >= self.settings.reconcile_interval_seconds:
            self._last = now
            group_limits.sync(self.engine, self.settings, self.queues)  # limits the rows hold
            pauses.restore(self.engine, self.queues)  # and pauses
            self._walk(self._cursor, batches=BATCHES_PER_TICK)
        return self.stats.enqueued - enqueued

    def _look_at_epochs(self) -> None:
        """The epoch check: a loss pass for each queue lost; an outage, begun or over."""
        for queue in self.check_epochs():  # lost again: its pass starts over, last
            self._urgent.pop(queue, None)
            self._urgent[queue] = Cursor((queue,), 0.0, lost=True)
        failures, self._failures = self._failures, self._failure_count()
        # a node down (its rows wait for a pass after it), a read that failed before its
        # retry worked, or a failure elsewhere in this process since the last check (it
        # begins an outage; during one, this look working again ends it)
        if self._epochs.unreadable or self._epochs.faltered or (
                self._failures != failures and not self._outage.down):
            self._outage.failed()
        else:
            self._outage.worked()

    def _failure_count(self) -> int:
        return self.engine.health.failures + (self._failures_of() if self._failures_of else 0)

    @property
    def busy(self) -> bool:  # a loss pass or the passes after an outage have rows left
        return bool(self._urgent)

    def _walk(self, cursor: Cursor, deadline: float = math.inf, batches: int = -1) -> bool:
        """Batches of ``cursor``'s walk until it wraps around (True: a full walk is done),
        ``deadline`` (monotonic) passes or ``batches`` were looked at."""
        while batches != 0 and time.monotonic() < deadline:
            batches -= 1
            self._batch(cursor)
            if cursor.wrapped:
                return True
        return False

    # -- on demand (manage.py delayq_reconcile) ---------------------------------------

    def run_all(self, batch: int = BATCH, grace_seconds: float | None = None, *,
                assume_lost: bool = False, dry_run: bool = False,
                skip: frozenset[str] = frozenset()) -> int:
        """Walk every live row once (but for the ids in ``skip``); with data loss
        (detected or assumed), no grace.

        Suspects get their second look after ``confirm_seconds``; right away when no
        worker is alive (nobody has an audit flush on its way)."""
        lost = set(self.check_epochs(create=not dry_run))
        if not dry_run:  # Redis's group limits as the rows and the settings say
            group_limits.sync(self.engine, self.settings, self.queues)
        # the rows' pauses before any put-back: a queue whose pause fails is not walked
        unpaused = set() if dry_run else pauses.restore(self.engine, self.queues)
        while not dry_run and workflows.sweep(router.db_for_write(Job)):
            pass  # children of parents final elsewhere: released or cancelled first
        if assume_lost:
            for queue in set(self.queues) - lost:
                self._epochs.assume_lost(queue)
            lost |= set(self.queues)
        grace = self.settings.reconcile_grace_seconds if grace_seconds is None else grace_seconds
        enqueued, missing = self.stats.enqueued, len(self.stats.missing)
        for queue in [q for q in self.queues if q not in unpaused]:
            self._walk(Cursor((queue,), 0.0 if queue in lost else grace, lost=queue in lost,
                              batch=batch, dry_run=dry_run, skip=skip))
        if self._suspects and not dry_run:
            if self._live.any_alive():
                time.sleep(self.confirm_seconds)
            while self._suspects:
                before = len(self._suspects)
                self._confirm(force=True)
                if len(self._suspects) >= before:  # decisions waiting on a silent worker
                    time.sleep(0.5)
        return self.stats.enqueued - enqueued + len(self.stats.missing) - missing

    # -- epoch: did Redis lose this queue's data? -------------------------------------

    def check_epochs(self, create: bool = True) -> list[str]:
        """Queues whose data Redis lost (``core/epochs.py``): they need a loss pass.

        ``create=False`` (a dry run) writes nothing: a missing epoch stays missing."""
        lost = self._epochs.check(create)
        if lost:
            self._suspects.clear()  # whatever they were, the loss pass decides now
        return list(lost)

    # -- one batch ----------------------------------------------------------------------

    def _batch(self, cursor: Cursor) -> int:
        """One batch of ``cursor``'s walk; returns how many jobs were (or, in a dry run,
        would be) re-enqueued at once."""
        if not (rows := reconcile_state.live_rows(cursor, unqueueable.read)):
            return 0
        self.stats.examined += len(rows)  # a row the reconciler cannot use ends dead alone
        if not (rows := unqueueable.screen(rows, self.stats.to_settle if cursor.dry_run
                                           else None)):
            return 0
        seen_ms = self.engine.time_ms()  # before the look: whoever beats later was alive
        found = self._find(rows, seen_ms)
        took = {f.row.pk for f in found if cursor.lost and self._epochs.took(f.row.queue, f.row.pk)}
        if len(took) < len(found):  # rows of data sets the loss did not take: no loss
            found = [f for f in found if f.row.pk in took] + self._leave_to_live_workers(
                [f for f in found if f.row.pk not in took])
        if cursor.dry_run:
            self.stats.missing += [f.row.pk for f in found if not f.settles]
            self.stats.to_settle += [f.row.pk for f in found if f.settles]
            return sum(not f.settles for f in found)
        now, act = time.monotonic(), []
        for f in found:
            taken, lost_at = f.row.pk in took, self._epochs.lost_at.get(f.row.queue)
            if taken and not f.dead and lost_at is not None and (  # changed before the loss
                    f.row.updated_at < lost_at - timedelta(seconds=LOSS_MARGIN_SECONDS)):
                act.append(f)
            elif taken or len(self._suspects) < MAX_SUSPECTS:
                self._suspects.setdefault(f.row.pk, Suspect(f.row.status, f.row.updated_at,
                                                            now, seen_ms, taken))
        return self._act(act, None, lost=True)

    def _look_at_orphans(self) -> None:
        """The running rows of silent workers (``Liveness.orphaned``) and the live rows of
        jobs they settled in Redis (``reconcile_records``): first look now, the second a
        lease later (a worker whose beats a Redis stall held up has beaten again by then)."""
        rows = self._live.orphaned(self.queues, skip=self._suspects, batch=BATCH,
                                   read=unqueueable.read)
        rows += silent_rows(self.engine, self._live, self.queues, {
            r.pk for r in rows} | self._suspects.keys(), BATCH, unqueueable.read)
        if not rows:
            return
        seen_ms = self.engine.time_ms()  # before the look, as in ``_batch``
        seen = time.monotonic() + max(0.0, self.settings.lease_seconds - self.confirm_seconds)
        found = self._leave_to_live_workers(self._find(unqueueable.screen(rows), seen_ms))
        for f in found[:MAX_SUSPECTS - len(self._suspects)]:
            self._suspects[f.row.pk] = Suspect(f.row.status, f.row.updated_at, seen, seen_ms, False)

    def _confirm(self, force: bool = False) -> None:
        """Second look at suspects: act on those whose row did not move meanwhile."""
        horizon = time.monotonic() - self.confirm_seconds
        due = [pk for pk, sus in self._suspects.items() if force or sus.seen <= horizon][:BATCH]
        if not due:
            return
        rows = {r.pk: r for r in unqueueable.screen(unqueueable.read(Job.objects.filter(
            pk__in=due, status__in=LIVE_STATUSES).only(*reconcile_state.LIGHT), BATCH))}
        still: dict[bool, list[Job]] = {False: [], True: []}
        seen: dict[str, Suspect] = {}
        for pk in due:
            sus, row = self._suspects.pop(pk), rows.get(pk)
            if row is not None and (row.status, row.updated_at) == (sus.status, sus.updated_at):
                still[sus.lost].append(row)
                seen[pk] = sus
        for lost, items in still.items():
            if items:
                found = self._find(items)
                self._act(found if lost else self._leave_to_live_workers(found), seen, lost=lost)

    def _act(self, found: list[Finding], seen: dict[str, Suspect] | None, *,
             lost: bool = False) -> int:
        """Settle what is final in Redis; re-enqueue the rest (``seen``: their first look;
        ``lost``: rows of data Redis lost)."""
        self.stats.settled += reconcile_state.settle([f for f in found if f.settles], self.engine)
        return self._enqueue([f.row for f in found if not f.settles], seen, lost)

    # -- where the jobs are -------------------------------------------------------------

    def _find(self, rows: list[Job], now_ms: int | None = None) -> list[Finding]:
        """Rows whose job Redis does not hold, or holds as dead: each row's place, envelope
        and attempts (read atomically, ``MULTI_ROWS`` rows per MULTI: ``Engine.presence``).
        ``now_ms``: Redis's time, when the caller has just read it."""
        now_ms = self.engine.time_ms() if now_ms is None else now_ms
        found, horizon = [], now_ms - RECENT_SECONDS * 1000
        for row, place in reconcile_state.places(self.engine, rows):
            if place.queued:
                continue
            # settled by a worker (its audit row is coming) or dead: final in Redis
            final = place.settled is not None or place.dead
            if not final and place.envelope:
                self.stats.orphans += 1
                logger.error("reconciler: job %s has an envelope but is in no queue set of %r "
                             "(partial data loss or eviction?); it cannot run until repaired",
                             shown(row.pk), row.queue)
            elif not final and place.reconciled_ms is not None and place.reconciled_ms >= horizon:
                logger.debug("reconciler: job %s was re-enqueued moments ago", shown(row.pk))
            else:
                found.append(Finding(row, place))
        return found

    def _leave_to_live_workers(self, found: list[Finding]) -> list[Finding]:
        """Without a loss, a running row whose worker heartbeats is that worker's, and so
        is a job settled in Redis by a worker that heartbeats: its audit flush is on its
        way (however long the database keeps it waiting)."""
        owners = [f.owner for f in found]
        alive = self._live.alive(set(owners))  # none named (""): no look
        keep = [f for f, owner in zip(found, owners) if owner not in alive]
        if waiting := len(found) - len(keep):
            self.stats.waiting_on_live_worker += waiting
            logger.debug("reconciler: %d running row(s) missing from Redis left to their live "
                         "worker (audit flush pending)", waiting)
        return keep

    # -- acting -------------------------------------------------------------------------

    def _enqueue(self, rows: list[Job], seen: dict[str, Suspect] | None,
                 lost: bool = False) -> int:
        # (rows of ids no script takes, or of values unusable here, ended dead: ``screen``)
        if not rows:
            return 0
        seeds = self._live.seeds(rows, seen, LOSS_MARGIN_SECONDS)
        # A delivery lost data held may be unrecorded: never its attempt number again,
        # also when the loss came before this reconciler's first look (it saw no loss).
        reconcile_state.count_lost_deliveries(
            rows, seeds, self._epochs.lost_at if lost else self._epochs.began(),
            self._epochs.witnessed, LOSS_MARGIN_SECONDS, 2 * self.settings.lease_seconds)
        ready = []
        for row in rows:
            if seeds[row.pk] is None and seen:  # a worker may be dead or just quiet:
                self._suspects.setdefault(row.pk, seen[row.pk])  # look again next time
            else:
                ready.append(row)
        # the audit counts them before Redis does
        reconcile_state.record_charges(ready, seeds, lost)
        added = 0
        for queue, items in reconcile_state.by_queue(ready).items():
            # Per MULTI of MULTI_ROWS rows (``Engine.reenqueue``): remember the ids, seed
            # their attempts, run enqueue.lua with each row's due time, priority and group.
            # Atomic, so a reconciler killed half-way never leaves ids "remembered" but not
            # enqueued (the others would skip them for RECENT_SECONDS). HSETNX: a counter
            # Redis already holds (the job was claimed meanwhile) is never lowered.
            jobs = [(row.pk, at_ms(row.run_at), row.priority, row.group) for row in items]
            added += self.engine.reenqueue(queue, jobs, seeds, keep_ms=RECENT_SECONDS * 1000,
                                           keep_max=MAX_RECENT,
                                           epochs=None if lost else self._epochs.known)
        if added:
            self.stats.enqueued += added
            tried = ", ".join("%s (%s%s, next attempt %d)" % (
                shown(r.pk), shown(r.status), " on %s" % shown(r.worker_id) if r.worker_id
                else "", (seeds[r.pk] or 0) + 1) for r in ready[:5])
            logger.warning("reconciler re-enqueued %d job(s) missing from Redis, of %d it "
                           "tried (the first tried: %s)", added, len(ready), tried)
        return added
