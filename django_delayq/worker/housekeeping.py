"""Housekeeping: what keeps leases, the registry and the rows in order besides the jobs.

- The heartbeat thread (``delayq-heartbeat``, nothing else on it) every ``LEASE_SECONDS /
  3``: extends the leases of the jobs held and publishes the worker in the registry
  (``Housekeeping.heartbeat``), renews the callable-limit slots of the functions
  running (``gates.StartGate.renew``).
- The keeper thread (``delayq-keeper``), every half second (at most a third of a lease),
  not while draining: retention (``retention.py``), then the schedules' pass
  (``core/periodic.py``), then the reconciler (``core/reconcile.py``); at once again while
  a loss pass has rows left (it works in slices of half a second), so a pass after a
  loss never holds the schedules' pass back longer than a slice.
- Lease recovery (``LeaseRecovery``), on the main loop (``recover``) every
  ``RECOVER_INTERVAL_SECONDS``, queue by queue through the claims' per-queue backoff.

Neither a busy main loop nor a slow reconcile or retention round can let this worker's
leases lapse (which would run its jobs twice), and a reconcile pass cannot delay a due job.

**Worker liveness**: extending the leases this worker holds and publishing that it lives.
The heartbeat thread calls ``heartbeat`` every ``LEASE_SECONDS / 3`` with the jobs the
worker holds (running or waiting for a thread). Each queue's leases (a sharded queue's:
each shard's) are extended on their own: on a cluster, one node down must not cost the
other queues their leases. A lease that could not be extended was already taken back (the
job is redelivered) and is logged. The ledger is told when each extended lease ends at the
earliest (the call's send plus the lease, on ``lease_clock``; ``Ledger.extended``): a job
thread starts a held job only while its lease has time left (``runner.py``). The
worker's info (host, pid, queues, concurrency, start time,
jobs held, claimed and settled; ``supervisor``: the id of the ``delayq_worker --processes`` that
started it, or null; ``processes``: how many children that supervisor runs, else 1;
``jobs``: the running jobs, longest-running first, at most 50, each ``{"id", "queue",
"callable", "started_ms"}``) is then published under its id (``Engine.register_worker``): the
reconcilers wait for a registered worker's audit flush instead of re-enqueueing rows it
settled, and ``delayq_status`` lists the live workers from it.

Under ``delayq_worker --processes`` each heartbeat is also told to the supervisor
(``tracking.Link.beat``, never blocking on the socket), besides the link's own beats
every half second, which go on during a Redis stall: a child whose beats stop while it
holds jobs (a job holding the GIL starves every thread) is killed before its leases
lapse.

``unregister`` removes the worker on a clean exit, best effort: one that cannot be
removed falls silent, as a crashed worker would; when it drained with its audit buffer
written, the database records that clean stop (``core/worker_stops.py``), so its
silence does not count as a crash whose runs may have gone unrecorded.

**Lease recovery**: taking back the leases that expired and recording the lost attempts.

A job whose worker died, or stopped heartbeating, keeps its lease until it expires; the
main loop of every worker then takes it back (``Engine.recover``, bounded batches of 100,
at most ten per queue and round). Redis decides what becomes of each job, as for a nack:
retried, dead (no attempts left) or cancelled. The attempt is recorded as failed with
``error_type`` ``django_delayq.exceptions.LeaseLost`` and ``LOST_LEASE`` as its message.
Its ``JobAttempt`` keeps when and on which worker it started: the ``started_at`` and
``worker_id`` its worker's start wrote on the row (read with the ``max_attempts``), when
that write landed before the worker died (the row shows that attempt started; else none:
the start is batched, ``AUDIT_FLUSH_SECONDS``). The signals name no worker
(``worker_id=""``): the worker that lost it is gone or no longer owns it. After a call
that recorded lost attempts, the audit writer's thread is asked to write them at once
(``AuditWriter.flush_soon``); this loop never waits for that write: a writer holding the
database (an atomic job's transaction on SQLite, a row lock) would stall its claims, time
limits and the other queues' recovery. A next attempt's start reads them best effort (a
task's ``TaskContext`` and ``task_started`` list the ``LeaseLost``): one started by this
worker finds them in its tasks cache until they are written (``tasks_results.py``); one
another worker (or a sibling child under ``--processes``) starts before they are written
misses them.

A job's ``max_attempts`` lives in its audit row, not in Redis: the rows of the leases
about to expire (``Engine.expiring``, a margin for clock skew with Redis: ``margin_ms``)
are read first (``payloads.lease_rows``, with the last start they saw) and passed along.
A row already final then (its worker wrote it before Redis could settle the job:
``early_rows.py``; an atomic job's commit) records no lost attempt: its run ended and is
recorded; Redis's retry of it is set aside at its claim.

With the default ``LEASE_SECONDS`` (6 s, extended every 2 s by the heartbeat thread) and
``RECOVER_INTERVAL_SECONDS`` (1 s), a killed worker's jobs are taken back 4-7 s after the
kill and claimed again at once (``recover.lua`` publishes them as due now).

A lease that expired because nobody could reach Redis (Redis stalled, or a network cut)
is not a dead worker's: every live worker extends its leases again within a heartbeat
once Redis answers. So a worker takes leases back only after an unbroken run of half a
lease of recover calls on the queue (``Contact``, checked by recover.lua on the server
clock; a gap of more than half a lease, or two recovery intervals, breaks the run): after
a stall, the live holders re-extend first and only the dead ones' leases are taken back.
A worker just started waits that long too. A stall shorter than the gap goes unnoticed,
which is safe while the gap is under the two thirds of a lease a held lease always has
left: ``RECOVER_INTERVAL_SECONDS`` at most a quarter of ``LEASE_SECONDS`` (1 s and 6 s by
default).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import connections
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_delayq.core import group_limits, pauses, payloads, worker_stops
from django_delayq.engine.logtext import logged, shown
from django_delayq.engine.outcomes import Contact, NackOutcome, lease_clock
from django_delayq.engine.replies import grouped
from django_delayq.engine.shard_health import OUTAGES
from django_delayq.models import FINAL_STATUSES, JobStatus
from django_delayq.worker.audit import AuditWriter, OutageLog
from django_delayq.worker.claiming import Claiming, monotonic_ms
from django_delayq.worker.ledger import Delivery, Ledger, delivery
from django_delayq.worker.outcome import LEASE_LOST, LOST_LEASE, STATUS_OF
from django_delayq.worker.retention import Retention
from django_delayq.worker.settle import logger as settle_log
from django_delayq.worker.settle import record_failure

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.core.reconcile import Reconciler
    from django_delayq.engine import Engine
    from django_delayq.engine.outcomes import ClaimedJob
    from django_delayq.worker.runner import Execution
    from django_delayq.worker.settlement import Settlement
    from django_delayq.worker.tracking import Supervision

logger = logging.getLogger(__name__)

MAX_JOBS_SHOWN = 50
BATCH = 100  # leases taken back per recover call
ROUNDS = 10  # batches per queue and call: a large backlog of lapsed leases is spread out


class Housekeeping:
    """Who keeps house: the heartbeat and keeper threads (``start``, ``stop``) and the main
    loop's lease recovery (``recover``). It builds what only its threads run: the
    schedules' ``Keeper`` (``schedules``), the reconciler, retention, lease recovery."""

    def __init__(self, engine: Engine, settings: Settings, ledger: Ledger,
                 audit: AuditWriter, *, claiming: Claiming, execution: Execution,
                 settlement: Settlement, reconciler: Reconciler, worker_id: str, name: str,
                 supervision: Supervision | None) -> None:
        self.engine, self.settings, self.ledger = engine, settings, ledger
        self.gate = execution.gate  # the heartbeat renews its callable-limit slots
        self.claiming, self.settlement = claiming, settlement
        self.queues = claiming.queues
        # what the heartbeat publishes (``info``)
        self.worker_id, self.name, self.supervision = worker_id, name, supervision
        self.started_ts = datetime.now(UTC)
        self.recovery = LeaseRecovery(engine, settings, audit)
        self.reconciler = reconciler  # the worker's (``loop.py``: ``Worker.__init__``)
        self.retention = Retention(engine, settings, worker_id)  # old rows, dead workers
        from django_delayq.core.periodic import Keeper  # lazy: a 13-module import chain else
        self.schedules = Keeper(worker_id=worker_id)  # the keeper thread's pass (periodic.py)
        self._last_recover = -1e18
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._reconcile_outage = OutageLog(logger, "reconciler tick")
        self.beat_s = settings.lease_ms / 3000  # the heartbeat's period: a third of a lease

    def limits_first(self) -> None:
        """Redis's group limits and pauses as the rows say, before this worker's first
        claim: a Redis that holds none (a new ``PREFIX``, lost data) would let claims past
        a group's override, or from a paused queue, until the reconciler's first pass.
        Failing, that pass writes them."""
        for queue in self.queues:  # one at a time: a failing queue (a shard's node down)
            try:  # costs the others nothing
                self.claiming.queue_gate.write_limit(queue)  # the settings', as a claim would
                group_limits.sync(self.engine, self.settings, [queue])
                pauses.restore(self.engine, [queue])  # a shard failing: the reconciler
            except Exception as exc:  # noqa: BLE001 - the reconciler's pass writes them later
                logger.warning("worker %s: the limits of queue %s not checked before the first "
                               "claim (the reconciler writes them): %s", shown(self.worker_id),
                               shown(queue), shown(exc))
                if isinstance(exc, RedisTimeoutError):  # a stalled Redis: one wait, not one
                    return  # a queue (a node refusing fails at once: the others go on)

    def start(self) -> None:
        for target, name in ((self._keeper_loop, "delayq-keeper"),
                             (self._beat_loop, "delayq-heartbeat")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    # -- lease recovery, on the main loop ------------------------------------------

    def recover(self) -> None:
        now = monotonic_ms()
        if now - self._last_recover >= self.settings.recover_interval_seconds * 1000:
            self.claiming.backoff.each(self.queues, self.recovery.recover)
            self._last_recover = now  # after it worked: a failed recovery is retried next round

    def wait_ms(self, wait_ms: float) -> float:
        """``wait_ms``, or less: until the next recovery is due."""
        return min(wait_ms, self._last_recover + self.settings.recover_interval_seconds * 1000
                   - monotonic_ms())

    # -- the heartbeat: leases extended, the registry entry -------------------------

    def heartbeat(self, held: list[ClaimedJob], *, claimed: int, processed: int,
                  holding: Callable[[], list[ClaimedJob]] | None = None) -> None:
        """Extend the leases of held jobs and publish this worker's liveness; under a
        supervisor, tell it the heartbeat ran (``tracking.Link.beat``). ``holding``: what
        the worker holds now; a lease not extended is reported lost only when its job is
        still held (one settled since ``held`` was read has simply ended), and a job it
        holds unstarted is dropped (``Ledger.lost``: the redelivered copy runs instead)."""
        beat_at = time.monotonic()
        failed: list[Exception] = []
        lost: list[ClaimedJob] = []
        until: dict[Delivery, float] = {}  # when each extended lease ends, at the earliest
        unknown: set[Delivery] = set()  # those whose extend failed: nothing new known
        lease_s = self.settings.lease_ms / 1000 if self.engine.clock is None else math.inf
        for (queue, _), jobs in grouped(held, lambda job: (
                job.queue, self.engine.home_of(job.queue, job.id))).items():
            sent = lease_clock()
            try:  # each queue (a sharded one: each shard) on its own: on a cluster, one
                results = self.engine.extend(queue, [(j.id, j.token) for j in jobs],
                                             self.settings.lease_ms)  # node down must not
            except OUTAGES as exc:  # cost the others their leases
                failed.append(exc)
                unknown.update(map(delivery, jobs))
                continue
            lost += [job for job, ok in zip(jobs, results) if not ok]
            until.update((delivery(j), sent + lease_s if ok else -math.inf)
                         for j, ok in zip(jobs, results))
        self.ledger.extended(until, unknown)  # read before each start (Ledger.lease_left)
        if lost and holding is not None:
            now_held = {(j.queue, j.id, j.token) for j in holding()}
            lost = [j for j in lost if (j.queue, j.id, j.token) in now_held]
        for job in lost:
            logger.warning("job %s: lease lost while held by this worker", shown(job.id))
        for job in self.ledger.lost(lost):  # held unstarted: dropped, never to start here
            logger.warning("job %s: not started here; the redelivered copy runs", shown(job.id))
        if self.supervision is not None:  # the leases run from beat_at at least
            self.supervision.link.beat(beat_at)
        self.engine.register_worker(self.worker_id, self.info(held, claimed, processed))
        if failed:
            raise failed[0]

    def info(self, held: list[ClaimedJob], claimed: int, processed: int) -> str:
        """This worker's registry entry (JSON)."""
        sup = self.supervision
        runs = self.ledger.running_jobs()
        return json.dumps({
            "name": self.name, "host": socket.gethostname(), "pid": os.getpid(),
            "queues": list(self.queues),
            "concurrency": self.claiming.concurrency, "started": self.started_ts.isoformat(),
            # running: jobs a thread runs; waiting: claimed, no thread yet (prefetch)
            "running": len(runs), "waiting": self.ledger.waiting(),
            "claimed": claimed, "processed": processed,
            "supervisor": sup.supervisor_id if sup is not None else None,
            "processes": sup.processes if sup is not None else 1,
            "jobs": [r.info() for r in runs[:MAX_JOBS_SHOWN]]})

    def unregister(self, *, clean: bool = False) -> None:
        """Leave the registry, best effort. ``clean``: the worker drained and its audit
        buffer is written; when Redis does not answer, the database records that stop
        instead (``core/worker_stops.py``): its silent entry hides no unrecorded run."""
        try:
            self.engine.unregister_worker(self.worker_id)
        except Exception:  # noqa: BLE001 - best effort on the way out
            logger.debug("could not unregister worker %s", shown(self.worker_id))
            if clean:
                worker_stops.record(self.worker_id)

    # -- the threads ---------------------------------------------------------------

    def _beat_loop(self) -> None:
        """Heartbeats every ``LEASE_SECONDS / 3``, on a thread that does nothing else: neither
        a busy main loop nor a slow reconcile or retention round can let the leases lapse."""
        while True:
            try:
                self.heartbeat(self.ledger.held(), claimed=self.claiming.handover.claimed_total,
                               processed=self.settlement.settler.processed,
                               holding=lambda: self.ledger.held(sent=False))
                self.gate.renew()  # callable-limit slots of the functions running
            except Exception as exc:  # noqa: BLE001 - Redis down: try again next beat
                logger.warning("heartbeat failed: %s", shown(exc))
            if self._stop.wait(self.beat_s):
                return

    def _keeper_loop(self) -> None:
        """Retention and the reconciler, on their own thread: not held up by the main loop."""
        while not self._stop.is_set():
            if not self.claiming.draining:  # no keeper pass once draining
                self.schedules.tick(self.retention.tick)  # retention, then schedules
                try:
                    self.reconciler.tick()
                except OUTAGES as exc:  # the main loop reports outages; try next time
                    logger.debug("reconciler: Redis unavailable: %s", shown(exc))
                except Exception as exc:  # noqa: BLE001 - never let the keeper die
                    self._reconcile_outage.failed(exc, min(self.beat_s, 0.5))
                else:
                    self._reconcile_outage.ok()
                    if self.reconciler.busy:  # a loss pass in slices: schedules between them
                        continue
            self._stop.wait(min(self.beat_s, 0.5))
        connections.close_all()  # this thread's own database connections


class LeaseRecovery:
    def __init__(self, engine: Engine, settings: Settings, audit: AuditWriter) -> None:
        self.engine, self.settings, self.audit = engine, settings, audit
        self._contact: dict[str, Contact] = {}  # per queue: this worker's run of calls
        # How far ahead of this host's clock a lease counts as expiring (skew with Redis):
        # a third of the lease, at most 5 s. A held lease always has more than two thirds of
        # it left (it is extended every third), so rows are read only for leases whose
        # worker missed a heartbeat, not for every job running.
        self.margin_ms = min(5000, settings.lease_ms // 3)

    def recover(self, queue: str) -> None:
        """Take back expired leases (bounded batches) and record the lost attempts; then
        have the audit writer write them at once (``AuditWriter.flush_soon``: never waits
        on the database, which a writer may hold locked)."""
        recorded = False
        try:
            for _ in range(ROUNDS):
                found, done = self._round(queue)
                recorded = recorded or found
                if done:
                    return
        finally:
            if recorded:
                self.audit.flush_soon()

    def _round(self, queue: str) -> tuple[bool, bool]:
        """One batch: whether it recorded a lost attempt, and whether it was the last."""
        # Jobs keep their max_attempts in the audit row: read those of the leases that
        # are about to be taken back (a margin covers clock skew with Redis).
        expiring = self.engine.expiring(queue, within_ms=self.margin_ms, limit=BATCH)
        rows = payloads.lease_rows(expiring) if expiring else {}
        limits = {job_id: row[0] for job_id, row in rows.items()}
        found = self.engine.recover(queue, limit=BATCH,
                                    default_max_attempts=self.settings.default_max_attempts,
                                    dead_max=self.settings.dead_max, max_attempts=limits,
                                    contact=self._contact.setdefault(queue, self._new_contact()))
        now = datetime.now(UTC)
        recorded = False
        for r in found:
            status = STATUS_OF.get(r.outcome)
            if status is not None and (row := rows.get(r.id)) and row[4] in FINAL_STATUSES:
                logged(logger.info, "job %s: lease taken back (attempt %d) after its row was "
                       "made final (%s): no lost attempt recorded; its next claim sets it "
                       "aside", shown(r.id), r.attempts, row[4])
            elif status is not None:
                self._record(queue, r.id, status, r.attempts, now, rows.get(r.id))
                recorded = True
            elif r.outcome is NackOutcome.NOT_STARTED:
                logged(logger.info, "job %s: claimed by a worker that stopped before "
                       "starting it; due again, no attempt charged (%d run so far)",
                       shown(r.id), r.attempts)
        return recorded, len(found) < BATCH

    def _new_contact(self) -> Contact:
        """Half a lease of unbroken calls; a gap of more than half a lease, or of two
        recovery intervals if longer (the calls' own spacing), breaks the run."""
        lease_ms = self.settings.lease_ms
        interval_ms = int(self.settings.recover_interval_seconds * 1000)
        return Contact(need_ms=lease_ms // 2, gap_ms=max(lease_ms // 2, 2 * interval_ms))

    def _record(self, queue: str, job_id: str, status: JobStatus, attempt: int,
                now: datetime, row: tuple[int, int, datetime | None, str, str] | None) -> None:
        """The lost attempt ``attempt``, failed. Its start (when, on which worker) is the
        one its row shows, when the row saw that attempt start (its worker's audit wrote
        it): its ``JobAttempt`` keeps them."""
        dead = status is JobStatus.DEAD  # at ERROR on settle's logger, as any dead job's
        logged((settle_log if dead else logger).log, logging.ERROR if dead else logging.WARNING,
               "job %s: %s (attempt %d) -> %s", shown(job_id), LOST_LEASE, attempt, status)
        fields: dict[str, Any] = {"status": status, "attempts": attempt, "updated_at": now}
        fields["run_at" if status is JobStatus.RETRYING else "finished_at"] = now
        ran_on = ""
        if row is not None and row[1] == attempt and row[2] is not None:
            fields["started_at"], ran_on = row[2], row[3]
        record_failure(self.audit, {"job_id": job_id, "queue": queue, "callable_path": ""},
                       status, fields, traceback="", error_type=LEASE_LOST, error=LOST_LEASE,
                       worker_id="", ran_on=ran_on)
