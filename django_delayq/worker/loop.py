"""The worker: a few components, each with one job, wired here and started and stopped
in a stated order; the main thread runs the loop that decides when the worker is done.

- ``Claiming`` (``claiming.py``): claims due jobs (the main loop's claims, the urgent
  timer, the wake listener, the queues' gates and backoff) and hands them to the threads.
- ``Execution`` (``runner.py``): ``concurrency`` job threads run them.
- ``Settlement`` (``settlement.py``): settles each outcome in Redis as it finishes, then
  records it (the settling thread, the ack stream's reader).
- ``Housekeeping`` (``housekeeping.py``): the heartbeat (leases, the registry), the
  keeper (schedules, the reconciler, retention), lease recovery.

They share the ``Ledger`` of the jobs the worker holds (``ledger.py``, ``tracking.py``)
and the ``AuditWriter`` (``audit.py``), which starts first and stops last.

Signals are acted on off the main thread (``SignalRelay``, ``signals_relay.py``): the
first SIGINT/SIGTERM drains (no new claims, running jobs finish, claimed-but-unstarted
jobs go back to Redis), the second stops hard (running jobs are abandoned; their leases
expire). Only signals to the process count: a supervised child's supervisor telling it
to drain is not one (``Worker.request_stop``). Exit codes: ``EXIT_*`` (``tracking.py``).

What runs is what the database says: a claimed job runs only when its audit row is live
and its payload usable (``payloads.read``); Redis supplies ids, never code or arguments.
No input stops a thread: each job's failure becomes its outcome, and a failing loop step
backs off with its log rate-limited (``audit.OutageLog``); the backoff resets only after a
round in which every step worked, so a database outage is not hidden by Redis steps that
work.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connections
from redis.exceptions import RedisError

from django_delayq.core import periodic
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine.logtext import logged, shown
from django_delayq.engine.server_mode import WrongRedisMode
from django_delayq.worker import tracking
from django_delayq.worker.audit import AuditWriter, OutageLog
from django_delayq.worker.claiming import Claiming
from django_delayq.worker.housekeeping import Housekeeping
from django_delayq.worker.ledger import Ledger
from django_delayq.worker.runner import Execution
from django_delayq.worker.settlement import Settlement
from django_delayq.worker.signals_relay import SignalRelay, signal_relay

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.worker.outcome import Outcome
    from django_delayq.worker.tracking import RunningJob, Supervision

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    queues: tuple[str, ...]
    concurrency: int = 4
    burst: bool = False
    max_jobs: int | None = None
    prefetch: int | None = None  # claimed-but-unstarted jobs held; None: by pace
    worker_id: str | None = None
    supervision: Supervision | None = None  # a child of `delayq_worker --processes`


def _waiting_for(runs: list[RunningJob], now: float) -> str:
    """What a drain waits for, said when it begins: the running jobs (the first five,
    longest-running first)."""
    if not runs:
        return ""
    named = ", ".join("%s (running %.0fs)" % (shown(r.job.id), now - r.started_mono)
                      for r in runs[:5])
    return "; waiting for %d running job(s): %s%s" % (len(runs), named,
                                                       ", ..." if len(runs) > 5 else "")


class StopAsked:
    """Set by the first SIGTERM or SIGINT that arrives before the worker (or supervisor)
    installs its own handlers, i.e. while ``wait_for_redis`` waits: the handler only sets
    the flag; the wait ends and the command exits 0, nothing having run. Given a
    ``relay`` (a worker's: ``Worker.install_signal_handlers`` takes it over), the flag is
    set by the relay's thread."""

    def __init__(self, relay: SignalRelay | None = None) -> None:
        self.asked = False
        self.relay = relay
        for signum in (signal.SIGTERM, signal.SIGINT):
            if relay is None:
                signal.signal(signum, self._ask)
            else:
                relay.on(signum, self._ask)

    def _ask(self, *handler_args: object) -> None:  # a handler's (signum, frame), or none
        self.asked = True


def wait_for_redis(make_engine: Callable[[], Engine], stop: StopAsked | None = None,
                   orphaned: Callable[[], bool] = lambda: False) -> Engine | None:
    """The engine once Redis answers: the worker waits out an outage at start-up (a Redis
    Cluster client cannot even be created while no node answers). None when a stop was
    asked (``stop``), or when ``orphaned`` says the process that started this one is gone
    (a supervised child started as its supervisor died, before it could ask for the death
    signal): nobody waits for it. A server that answers in the wrong mode (a cluster node
    behind ``redis://``, a single server behind ``redis+cluster://``) is no outage to wait
    out: ``WrongRedisMode`` is raised."""
    delay = 0.1

    def give_up() -> bool:
        return (stop is not None and stop.asked) or orphaned()

    while not give_up():
        try:
            engine = make_engine()
            engine.ping()  # and in the mode its URL names
            return engine
        except WrongRedisMode:
            raise
        except RedisError as exc:
            logger.warning("waiting for Redis (%s); next try in %.1fs", shown(exc), delay)
            until = time.monotonic() + delay
            while time.monotonic() < until and not give_up():  # a stop ends the wait
                time.sleep(0.05)
            delay = min(delay * 2, 5.0)
    if stop is not None and stop.asked:
        logger.warning("stopped while waiting for Redis: the worker stops before it starts")
    else:
        logger.warning("the supervisor is gone: this child stops before it starts")
    return None


class Worker:
    def __init__(self, engine: Engine, settings: Settings, options: WorkerOptions) -> None:
        self.engine, self.settings, self.options = engine, settings, options
        # Operators see the name (--worker-id, else host:pid); leases, the registry and rows
        # name the name plus a token of this process start: a restart under the same name
        # never takes the dead process's place (its rows are the reconciler's).
        self.name = options.worker_id or "%s:%d" % (socket.gethostname(), os.getpid())
        self.id = "%s:%s" % (self.name, uuid.uuid4().hex[:6])
        self.wake = threading.Event()
        # Six collaborators: the two shared parts, then the four components. Each builds
        # what only it needs: Claiming the server clock (``claiming.clock``), Execution the
        # start gate (``execution.gate``) and the held jobs' cancels, Housekeeping the
        # schedules' keeper. The gate's slots are released through ``_release``.
        self.audit = AuditWriter(settings.audit_flush_seconds, settings.audit_batch)
        link = None if options.supervision is None else options.supervision.link
        if link is not None:
            self.audit.before_write = link.flush
            link.dead_man.horizon_s = tracking.DEAD_MAN_LEASES * settings.lease_ms / 1000
        # a timed-out attempt's function returned at last: its slot is freed now
        self.ledger = Ledger(lambda late: self._release([late]), link)  # a child's reports
        self.claiming = Claiming(engine, settings, self.ledger, self.wake,
                                 queues=options.queues, concurrency=options.concurrency,
                                 prefetch=options.prefetch, max_jobs=options.max_jobs,
                                 burst=options.burst)
        # the next tick of a schedule at its tick's start (the keeper's pass: housekeeping)
        self.settlement = Settlement(engine, settings, self.audit, self.ledger, self.id,
                                     release=self._release,
                                     on_settled=self.claiming.settled,
                                     on_start=periodic.tick_started)
        self.execution = Execution(engine, settings, self.ledger, self.claiming,
                                   self.settlement, worker_id=self.id,
                                   concurrency=options.concurrency)
        # its reconciler is told the queues the claims backed off: an outage its own looks
        # missed (made here: the housekeeping's import chain stays within 12 modules)
        reconciler = Reconciler(engine, settings, self.claiming.queues,
                                failures=lambda: self.claiming.backoff.failures)
        self.housekeeping = Housekeeping(engine, settings, self.ledger, self.audit,
                                         claiming=self.claiming, execution=self.execution,
                                         settlement=self.settlement, reconciler=reconciler,
                                         worker_id=self.id, name=self.name,
                                         supervision=options.supervision)
        # The worker's own state, no collaborator: its stop, its loop's failure log, and
        # the process's one signal relay (made once per process, not for this worker)
        self.draining = False
        self.hard_stop = False
        self._interrupt = threading.Event()  # cuts a failure pause short: stop requested
        self._round_failed = False
        self._outage = OutageLog(logger, "worker loop step", quiet=(RedisError,))
        self.signals = signal_relay()
        self._stop_lock = threading.RLock()  # the relay's thread, the link's listener
        self._signals = 0  # SIGTERM/SIGINT acted on (request_stop)
        self._stop_asked = 0.0  # monotonic: the drain's start

    @property
    def claimed_total(self) -> int:
        return self.claiming.handover.claimed_total

    def _release(self, ended: Sequence[Outcome]) -> None:
        """Free the callable-limit slots of ended attempts (the ledger's late ones, the
        settlement's settled ones) in the start gate: Execution's, built after the two,
        which call this only once jobs run."""
        self.execution.gate.release(ended)

    # -- signals: acted on by the relay's thread -------------------------------------

    def install_signal_handlers(self, stop: StopAsked | None = None) -> None:
        """SIGTERM and SIGINT request a stop; ``stop``: the handlers until now (a relay of
        theirs becomes this worker's; a stop they were asked is requested now, once)."""
        if stop is not None and stop.relay is not None:
            self.signals = stop.relay
        with self.signals.lock:  # a signal is the old action's or the new one's
            for signum in (signal.SIGTERM, signal.SIGINT):
                self.signals.on(signum, self.request_stop)
            if stop is not None and stop.asked:
                self.request_stop()

    def request_stop(self) -> None:
        """A SIGTERM or SIGINT to this process (the relay's action): the first drains,
        the second stops hard. Only signals count: a child's supervisor telling it to
        drain (``drain``) is no signal of its own. One signal sent to the whole process
        group reaches the child and its supervisor, which tells the child to drain: the
        two, in either order, are one request, and the child drains."""
        with self._stop_lock:
            self._signals += 1
            if self._signals > 1:
                self.stop_hard("a second signal")
            elif self.draining:
                logger.info("worker %s: a signal: draining already (a second one stops it "
                            "hard)", shown(self.id))
            else:
                self.drain("a signal; a second one stops it hard")

    def drain(self, why: str) -> None:
        """No new claims, running jobs finish, unstarted ones go back to Redis; then
        ``run`` returns ``EXIT_OK``. Once: a later call does nothing."""
        with self._stop_lock:
            if self.draining:
                return
            self._stop_asked = time.monotonic()
            self._wind_down()  # first: a project's log handler that raises stops nothing
            logged(logger.info, "worker %s: draining (%s)%s", shown(self.id), why,
                   _waiting_for(self.ledger.running_jobs(), self._stop_asked))

    def stop_hard(self, why: str) -> None:
        """Running jobs are abandoned (their leases expire); ``run`` returns
        ``EXIT_HARD_STOP``."""
        with self._stop_lock:
            if not self.draining:
                self._stop_asked = time.monotonic()
            logs = not self.hard_stop
            self.hard_stop = True
            self._wind_down()
            if logs:
                logged(logger.warning, "worker %s: stopping hard (%s)", shown(self.id), why)

    def _wind_down(self) -> None:
        self.draining = True
        self.claiming.drain()  # no keeper pass from now on either; wakes the main loop
        self._interrupt.set()

    # -- lifecycle -----------------------------------------------------------------

    def run(self) -> int:
        logger.info("worker %s starting: queues=%s concurrency=%d", shown(self.id),
                    shown(",".join(self.options.queues)), self.options.concurrency)
        # Schedules first: a tick missed while no worker ran is cancelled (skip policy)
        # before this worker could claim it; then on the keeper thread every 10 s. The
        # group limits the rows hold too, before the first claim.
        self.housekeeping.schedules.tick()
        self.housekeeping.limits_first()
        self.audit.start()
        self.settlement.start()
        self.claiming.start()
        self.execution.start()
        self.housekeeping.start()
        try:
            code = self._loop()
        except Exception:  # a step outside _step failed: stop as hard, but deregistered
            logger.exception("worker %s: the claim loop failed; stopping", shown(self.id))
            code = tracking.EXIT_ERROR
        finally:
            self._stage("housekeeping threads", self.housekeeping.stop)
            self._stage("claiming threads", self.claiming.stop)
            # what finished is acked before the audit's last flush
            self._stage("settlement", self.settlement.stop)
        if code in (tracking.EXIT_HARD_STOP, tracking.EXIT_ERROR):
            self._shutdown_hard()
            self.housekeeping.unregister()
        else:
            self._stage("job threads", self.execution.stop)
            self._stage("audit flush", self.audit.stop)
            # Only now: while this worker is registered, reconcilers wait for its audit
            # flush instead of re-enqueueing rows it settled; changes it could not write
            # leave it registered until it falls silent, as a crashed worker would. With
            # Redis unreachable, the database records the clean stop instead.
            if not self.audit.pending():
                self.housekeeping.unregister(clean=True)
        if threading.current_thread() is not threading.main_thread():
            connections.close_all()  # run() on a thread of its own: close what it opened
        logger.info("worker %s stopped (exit %d, %d jobs claimed)", shown(self.id), code,
                    self.claimed_total)
        return code

    def _stage(self, name: str, stop: Callable[[], object]) -> None:
        """A stage of the stop, with its duration: DEBUG, INFO from a second on."""
        started = time.monotonic()
        stop()
        took = time.monotonic() - started
        logger.log(logging.INFO if took >= 1.0 else logging.DEBUG, "worker %s: stopping %s "
                   "took %.2fs", shown(self.id), name, took)

    def _loop(self) -> int:
        while True:
            self.wake.clear()
            self._round_failed = False
            if self.hard_stop:
                return tracking.EXIT_HARD_STOP
            if self.draining:
                if self.claiming.hand_back():  # nothing held any more
                    logged(logger.info, "worker %s: drained in %.2fs", shown(self.id),
                           time.monotonic() - self._stop_asked)
                    return tracking.EXIT_OK
            elif self.options.burst and self.claiming.burst_finished():
                return tracking.EXIT_OK
            elif (self.options.max_jobs or 1 << 62) <= self.claimed_total:  # --max-jobs: run
                if self.ledger.idle():
                    return tracking.EXIT_OK
            else:
                self._step(self.claiming.claim_due)
            self._step(self._housekeeping)
            if not self._round_failed:  # every step of this round worked
                self._outage.ok()
            self.wake.wait(self._wait_seconds())

    def _step(self, step: Callable[[], object]) -> None:
        """Run one loop step; on failure log (rate-limited) and pause: a stop cuts the
        pause short, not a wake-up (no spin on a failure)."""
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - nothing may escape the loop
            self._round_failed = True
            if self._interrupt.wait(self._outage.backoff(exc)):
                self._interrupt.clear()

    def _housekeeping(self) -> None:
        """The main loop's housekeeping: attempts past their time limit fail, expired
        leases are taken back, jobs held a while have their cancels read again."""
        self.execution.expire_overdue()
        self.housekeeping.recover()
        self.execution.cancels.sweep()

    def _wait_seconds(self) -> float:
        """Until the next due time of a queue with room, the next recovery or the next
        time limit, at most ``WAKE_INTERVAL_SECONDS``."""
        wait_ms = self.claiming.wait_ms(self.settings.wake_interval_seconds * 1000)
        wait_ms = self.execution.wait_ms(self.housekeeping.wait_ms(wait_ms))
        return max(0.0, wait_ms / 1000)

    def _shutdown_hard(self) -> None:
        logger.warning("hard stop: abandoning %d running job(s); their leases will expire",
                       len(self.ledger.running_jobs()))
        self.claiming.release_unstarted()
        try:
            self.audit.flush()
        except Exception:  # noqa: BLE001
            logger.exception("audit flush failed during hard stop")


def attach(worker: Worker, supervision: Supervision) -> None:
    """Wire a child worker to its supervisor: say hello, obey ``drain``/``stop``, drain
    when the supervisor is gone (end of file of the link, or ``ORPHAN_SIGNAL`` from the
    kernel, relayed like the worker's other signals: ``SignalRelay``)."""

    def orphaned() -> None:
        worker.drain("its supervisor is gone")

    worker.signals.on(tracking.ORPHAN_SIGNAL, orphaned)
    supervision.link.send("h", os.getpid(), worker.id.replace("\t", " ").replace("\n", " "))
    # the supervisor's words are no signals: its drain never counts as the first of two
    threading.Thread(target=supervision.link.listen,
                     args=(worker.drain, worker.stop_hard, worker.ledger.running_jobs),
                     name="delayq-link", daemon=True).start()
    if supervision.orphaned():  # it died before the child asked for the signal
        orphaned()
