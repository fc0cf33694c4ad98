"""The worker: claims due jobs, runs them on threads, settles them in batches.

Threads: the main one claims and recovers expired leases; ``concurrency`` run jobs; a
settling thread acks/nacks finished jobs as they finish (``settle.py``); a listener
hears about earlier jobs; the urgent timer claims a job of priority above 0 at its due
time (``urgent.py``); an audit thread writes rows in batches; a heartbeat extends
leases; a keeper reconciles. Signal handlers only set flags: the first
SIGINT/SIGTERM drains (no new claims, running jobs finish, claimed-but-unstarted jobs go
back to Redis), the second stops hard (running jobs are abandoned; their leases expire).

What runs is what the database says: a claimed job runs only when its audit row is live
and its payload usable (``payloads.read``); Redis supplies ids, never code or arguments.
Held jobs are in the ``Ledger`` (``ledger.py``); settling is ``settle.py``, expired leases
``recovery.py``, the heartbeat ``liveness.py``. No input stops a thread: each job's
failure becomes its outcome, and a failing loop step backs off with its log rate-limited
(``audit.OutageLog``); the backoff resets only after a round in which every step worked,
so a database outage is not hidden by Redis steps that work.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections, connections
from redis.exceptions import RedisError

from django_delayq.core.conf import Settings
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine import ClaimedJob, Engine
from django_delayq.worker import gates, runner
from django_delayq.worker.audit import AuditWriter, OutageLog
from django_delayq.worker.drain import release_unstarted
from django_delayq.worker.handover import Handover
from django_delayq.worker.heartbeat import Liveness
from django_delayq.worker.ledger import key_of
from django_delayq.worker.queue_backoff import QueueBackoff
from django_delayq.worker.recovery import LeaseRecovery
from django_delayq.worker.retention import Retention
from django_delayq.worker.settling import SettleThread
from django_delayq.worker.shards import ShardBackoff, ShardSettler
from django_delayq.worker.tracking import Supervision, TrackedLedger
from django_delayq.worker.urgent import UrgentTimer
from django_delayq.worker.wakeup import monotonic_ms

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_HARD_STOP = 3
URGENT_BATCH = 4  # jobs a claim of the urgent timer takes (worker/urgent.py)
PREFETCH_SECONDS = 0.1  # claimed jobs beyond free threads: what they start in this time


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    queues: tuple[str, ...]
    concurrency: int = 4
    burst: bool = False
    max_jobs: int | None = None
    prefetch: int | None = None  # claimed-but-unstarted jobs held; None: by pace (_prefetch)
    worker_id: str | None = None
    supervision: Supervision | None = None  # a child of `delayq_worker --processes`


class Worker:
    def __init__(self, engine: Engine, settings: Settings, options: WorkerOptions) -> None:
        self.engine = engine
        self.settings = settings
        self.options = options
        # Operators see the name (--worker-id, else host:pid); leases, the registry and rows
        # name the name plus a token of this process start: a restart under the same name
        # never takes the dead process's place (its rows are the reconciler's).
        self.name = options.worker_id or "%s:%d" % (socket.gethostname(), os.getpid())
        self.id = "%s:%s" % (self.name, uuid.uuid4().hex[:6])
        self.wake = threading.Event()
        self.audit = AuditWriter(settings.audit_flush_seconds, settings.audit_batch)
        if options.supervision is not None:
            self.audit.before_write = options.supervision.link.flush
        self.gate = gates.StartGate(engine, settings, self._server_now)  # expiry, limits
        self.ledger = TrackedLedger(settings, options.supervision, on_late=self.gate.release_late)
        # a sharded queue is settled shard by shard: a node down holds back its shard only
        self.settler = ShardSettler(engine, settings, self.audit, self.id, self.gate.release)
        self.settler.keep = lambda kept: self.ledger.keep_unsettled(kept, [])
        self.audit.after_write = self.settler.landed  # their settled records may go
        self.recovery = LeaseRecovery(engine, settings, self.audit)
        self.queue_gate = gates.QueueGate(engine, settings)  # queue limits and pauses
        self.liveness = Liveness(engine, settings, self.id, name=self.name,
                                 queues=options.queues,
                                 concurrency=options.concurrency,
                                 running=self.ledger.running_jobs,
                                 waiting=self.ledger.waiting,
                                 supervision=options.supervision)
        # Claimed jobs wait for a thread by priority, then due time (not behind a backlog)
        self.handover = Handover(engine, settings, self.ledger)
        # Finished jobs are acked by a thread of their own, within milliseconds
        self.settling = SettleThread(self.ledger, self.settler, self._on_settled)
        self.settling.backoff = ShardBackoff(engine)
        self.backoff = QueueBackoff()
        self.draining = False
        self.hard_stop = False
        self.next_due: dict[str, int | None] = {q: None for q in options.queues}
        self.offset_ms = 0.0  # server clock - local monotonic clock
        self.listener = engine.wake_listener(options.queues, self.wake)
        self.urgent = UrgentTimer(self._claim_urgent, self._server_now)
        self.reconciler = Reconciler(engine, settings, options.queues)
        self.retention = Retention(engine, settings, self.id)  # old rows, dead workers
        self._threads: list[threading.Thread] = []
        self._last_poll = self._last_recover = -1e18
        self._keeper_stop = threading.Event()
        self._interrupt = threading.Event()  # cuts a failure pause short: stop requested
        self._backoff_s = 0.0
        self._settled_rounds = 0  # settling rounds so far (a --burst end waits for none)
        self._round_failed = False
        self._outage = OutageLog(logger, "worker loop step", quiet=(RedisError,))
        self._reconcile_outage = OutageLog(logger, "reconciler tick")

    @property
    def claimed_total(self) -> int:
        return self.handover.claimed_total

    @property
    def set_aside(self) -> int:  # claimed jobs not run: no row, or a final one
        return self.handover.set_aside

    # -- signals: flags only --------------------------------------------------------

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.request_stop()

    def request_stop(self) -> None:
        if self.draining:
            self.hard_stop = True
        self.draining = True
        self.wake.set()
        self._interrupt.set()

    # -- lifecycle -----------------------------------------------------------------

    def run(self) -> int:
        logger.info("worker %s starting: queues=%s concurrency=%d", self.id,
                    ",".join(self.options.queues), self.options.concurrency)
        # Schedules first: a tick missed while no worker ran is cancelled (skip policy)
        # before this worker could claim it; then on the keeper thread every 10 s.
        self.settler.schedules.tick()
        self.audit.start()
        self.settling.start()
        self.listener.start()
        self.urgent.start()
        for i in range(self.options.concurrency):
            t = threading.Thread(target=self._exec_loop, name="delayq-exec-%d" % i, daemon=True)
            t.start()
            self._threads.append(t)
        keeper = threading.Thread(target=self._keeper_loop, name="delayq-keeper", daemon=True)
        keeper.start()
        beat = threading.Thread(target=self._beat_loop, name="delayq-heartbeat", daemon=True)
        beat.start()
        try:
            code = self._loop()
        except Exception:  # a step outside _step failed: stop as hard, but deregistered
            logger.exception("worker %s: the claim loop failed; stopping", self.id)
            code = EXIT_ERROR
        finally:
            self._keeper_stop.set()
            keeper.join(timeout=10)
            beat.join(timeout=10)
            self.urgent.stop()
            self.listener.stop()
            self.settling.stop()  # what finished is acked before the audit's last flush
        if code in (EXIT_HARD_STOP, EXIT_ERROR):
            self._shutdown_hard()
            self.liveness.unregister()
        else:
            self.handover.stop_threads(len(self._threads))
            for t in self._threads:
                t.join(timeout=5)
            self.audit.stop()
            # Only now: while this worker is registered, reconcilers wait for its audit
            # flush instead of re-enqueueing rows it settled; changes it could not write
            # leave it registered until it falls silent, as a crashed worker would.
            if not self.audit.pending():
                self.liveness.unregister()
        if threading.current_thread() is not threading.main_thread():
            connections.close_all()  # run() on a thread of its own: close what it opened
        logger.info("worker %s stopped (exit %d, %d jobs claimed)", self.id, code,
                    self.claimed_total)
        return code

    def _loop(self) -> int:
        while True:
            self.wake.clear()
            self._round_failed = False
            if self.hard_stop:
                return EXIT_HARD_STOP
            if self.draining:
                with self.handover.lock:  # an urgent claim in flight has handed its jobs over
                    self._release_unstarted()
                    if self.ledger.idle():
                        return EXIT_OK
            elif self.options.burst and self._burst_finished():
                return EXIT_OK
            elif (self.options.max_jobs or 1 << 62) <= self.claimed_total:  # --max-jobs: run
                if self.ledger.idle():
                    return EXIT_OK
            else:
                self._step(self._claim_due)
            self._step(self._housekeeping)
            if not self._round_failed:  # every step of this round worked
                self._backoff_s = 0.0
                self._outage.ok()
            self.wake.wait(self._wait_seconds())

    def _step(self, step: Callable[[], object]) -> bool:
        """Run one loop step; on failure log (rate-limited), pause and return False."""
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - nothing may escape the loop
            self._round_failed = True
            self._backoff_s = min(max(self._backoff_s * 2, 0.1), 5.0)
            self._outage.failed(exc, self._backoff_s)
            self._pause(self._backoff_s)
            return False
        return True

    def _pause(self, seconds: float) -> None:
        """Sleep after a failure; a stop cuts it short, not a wake-up (no spin on a failure)."""
        if self._interrupt.wait(seconds):
            self._interrupt.clear()

    # -- claiming ------------------------------------------------------------------

    def _capacity(self) -> int:
        room = self.options.concurrency + self._prefetch() - self.ledger.capacity_used()
        if self.options.max_jobs is not None:
            room = min(room, self.options.max_jobs - self.claimed_total)
        return room

    def _prefetch(self) -> int:
        """Claimed jobs held beyond the free threads: what the threads start within
        ``PREFETCH_SECONDS`` at the recent pace of this worker's jobs, at most
        ``CLAIM_BATCH``; ``WorkerOptions.prefetch`` fixes it. Slow jobs are not prefetched:
        a due job does not wait here while another worker has an idle thread for it."""
        if self.options.prefetch is not None:
            return self.options.prefetch
        cap = self.settings.claim_batch
        pace = self.ledger.pace()
        if pace is None:
            return 0
        return min(cap, int(self.options.concurrency * PREFETCH_SECONDS / max(pace, 1e-4)))

    def _server_now(self) -> float:
        return monotonic_ms() + self.offset_ms

    def _claim_due(self) -> None:
        for queue, due in self.listener.take().items():
            known = self.next_due.get(queue)
            self.next_due[queue] = due if known is None else min(known, due)
            self.urgent.earlier(queue, due)  # full, the main loop claims nothing: the timer
        poll_all = monotonic_ms() - self._last_poll >= self.settings.wake_interval_seconds * 1000
        if poll_all:
            self._last_poll = monotonic_ms()
        now = self._server_now()
        ready = [q for q in self.options.queues
                 if poll_all or ((d := self.next_due[q]) is not None and d <= now)]
        self.backoff.each(ready, self._claim)

    def _claim(self, queue: str) -> None:
        self.queue_gate.write_limit(queue)  # at start-up
        while (room := self._capacity()) > 0 and self.queue_gate.open(queue, self._server_now()):
            before = monotonic_ms()
            with self.handover.lock:
                result = self.engine.claim(queue, min(room, self.settings.claim_batch),
                                           self.settings.lease_ms)
                self.offset_ms = result.now_ms - (before + monotonic_ms()) / 2
                self.next_due[queue] = self.queue_gate.note(queue, result)  # paused: None
                self.urgent.note(queue, result.next_urgent_ms)
                self._hand_over(queue, result.jobs)
            if len(result.jobs) < self.settings.claim_batch:  # not a full batch: settle
                return  # what finished first (rooms of a few jobs would loop for seconds)

    def _claim_urgent(self, queue: str) -> None:
        """The urgent timer's claim, on its thread: a few jobs over the room; not in --max-jobs
        or --burst (their main loop claims all it may run), nor once draining."""
        with self.handover.lock:
            if self.draining or self.options.max_jobs is not None or self.options.burst or \
                    self._capacity() <= -4 * URGENT_BATCH or \
                    not self.queue_gate.open(queue, self._server_now()):
                return
            result = self.engine.claim(queue, URGENT_BATCH, self.settings.lease_ms)
            self.urgent.note(queue, result.next_urgent_ms)
            self._hand_over(queue, result.jobs)

    def _hand_over(self, queue: str, claimed: list[ClaimedJob]) -> None:
        """Hand claimed jobs to the threads (``handover.py``). When their rows cannot be
        read they are back in Redis, due again at once: the next round claims them (and
        fails or works) instead of sleeping until a poll, so a working round means the
        rows are back."""
        try:
            self.handover.take(queue, claimed)
        except Exception:
            close_old_connections()
            known = self.next_due.get(queue)
            due = min(job.due_ms for job in claimed)
            self.next_due[queue] = due if known is None else min(known, due)
            raise

    def _burst_finished(self) -> bool:
        if not self.ledger.idle():
            return False
        settled = self._settled_rounds  # a job claimed below may end (and retry) meanwhile
        now = self.engine.stats(self.options.queues[0]).now_ms
        for q in self.options.queues:
            self._claim(q)
        with self.handover.lock:
            return (self.ledger.idle() and not self.queue_gate.holding(now)  # a limit holds some
                    and settled == self._settled_rounds
                    and all(d is None or d > now for d in self.next_due.values()))

    def _wait_seconds(self) -> float:
        wait_ms = self.settings.wake_interval_seconds * 1000
        if not self.draining and self._capacity() > 0:
            now = self._server_now()
            for queue, due in self.next_due.items():
                if due is not None:  # a queue backing off is due when its delay ends
                    wait_ms = min(wait_ms, max(self.queue_gate.due(queue, due) - now,
                                               self.backoff.remaining_ms(queue)))
        wait_ms = min(wait_ms, self._last_recover + self.settings.recover_interval_seconds * 1000
                      - monotonic_ms())
        if (limit := self.ledger.next_limit()) is not None:  # fail an overdue attempt on time
            wait_ms = min(wait_ms, (limit - time.monotonic()) * 1000 + 1)
        return max(0.0, wait_ms / 1000)

    # -- running -------------------------------------------------------------------

    def _exec_loop(self) -> None:
        while True:
            job = self.handover.next_job()
            if job is None:
                connections.close_all()  # this thread's connections, not the caller's
                return
            key = key_of(job)
            if not self.ledger.start(key, self.gate.time_limit(job)):
                continue  # released during drain
            try:
                admitted = self.gate.admit(job)  # expired? refused by a callable limit?
                outcome = admitted.ended or self._attempt(job, admitted)
            except Exception as exc:  # noqa: BLE001 - the job ends dead; the thread lives on
                logger.exception("job %s: the worker failed around its attempt", job.id)
                outcome = runner.crashed(job, exc)
            self.ledger.finish(key, outcome)
            self.settling.finished()  # acked now, on this thread

    def _attempt(self, job: ClaimedJob, admitted: gates.Admission) -> runner.Outcome:
        self.settling.wait_recorded(job.id)  # a quick retry sees its previous attempt
        self.settler.started(job, keep_due=admitted.limited)
        outcome = runner.run(job, worker_id=self.id,
                             default_max_attempts=self.settings.default_max_attempts,
                             default_backoff=self.settings.default_backoff)
        outcome.callable_limit = admitted.callable_limit  # its slot, freed once settled
        return outcome

    def _on_settled(self, outcomes: list[runner.Outcome]) -> None:
        """``outcomes`` were settled: a queue limit may have room now; the claim loop tops
        up the jobs waiting for a thread once fewer than the threads are left."""
        self._settled_rounds += 1
        self.queue_gate.settled(outcomes, self.next_due)
        if self.queue_gate.limited or self.ledger.waiting() < self.options.concurrency:
            self.wake.set()

    def _release_unstarted(self) -> None:
        release_unstarted(self.engine, self.ledger)

    # -- housekeeping: heartbeat, recovery -----------------------------------------

    def _expire_overdue(self) -> None:
        """Fail attempts running past their time limit (``Settings.timeout_for``): stop
        heartbeating them (their lease is not extended again), settle them as failures."""
        overdue = self.ledger.time_out_limits(time.monotonic(), lambda job, at, s: runner.timed_out(
            job, started_at=at, seconds=s, default_max_attempts=self.settings.default_max_attempts,
            default_backoff=self.settings.default_backoff))
        for job in overdue:
            logger.warning("job %s: still running past its time limit; failing this attempt "
                           "(its thread stays busy until the function returns)", job.id)

    def _housekeeping(self) -> None:
        self._expire_overdue()
        now = monotonic_ms()
        if now - self._last_recover >= self.settings.recover_interval_seconds * 1000:
            self.backoff.each(self.options.queues, self.recovery.recover)
            self._last_recover = now  # after it worked: a failed recovery is retried next round

    def _beat_loop(self) -> None:
        """Heartbeats every ``LEASE_SECONDS / 3``, on a thread that does nothing else: neither
        a busy main loop nor a slow reconcile or retention round can let the leases lapse."""
        beat_s = self.settings.lease_ms / 3000
        while True:
            try:
                self.liveness.heartbeat(self.ledger.held(), holding=self.ledger.unsettled_held,
                                        claimed=self.claimed_total,
                                        processed=self.settler.processed)
                self.gate.renew()  # callable-limit slots of the functions running
            except Exception as exc:  # noqa: BLE001 - Redis down: try again next beat
                logger.warning("heartbeat failed: %s", exc)
            if self._keeper_stop.wait(beat_s):
                return

    def _keeper_loop(self) -> None:
        """Retention and the reconciler, on their own thread: not held up by the main loop."""
        beat_s = self.settings.lease_ms / 3000
        while not self._keeper_stop.is_set():
            if not self.draining:
                self.settler.schedules.tick(self.retention.tick)  # retention, then schedules
                try:
                    self.reconciler.tick()
                except RedisError as exc:  # the main loop reports outages; try next time
                    logger.debug("reconciler: Redis unavailable: %s", exc)
                except Exception as exc:  # noqa: BLE001 - never let the keeper die
                    self._reconcile_outage.failed(exc, min(beat_s, 0.5))
                else:
                    self._reconcile_outage.ok()
            self._keeper_stop.wait(min(beat_s, 0.5))
        connections.close_all()  # this thread's own database connections

    def _shutdown_hard(self) -> None:
        logger.warning("hard stop: abandoning %d running job(s); their leases will expire",
                       self.ledger.running())
        self._release_unstarted()
        try:
            self.audit.flush()
        except Exception:  # noqa: BLE001
            logger.exception("audit flush failed during hard stop")

