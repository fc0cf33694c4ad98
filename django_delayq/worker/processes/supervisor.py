"""``delayq_worker --processes N``: a supervisor of N child worker processes.

Each child is a full ``Worker`` (its ``--concurrency`` threads claim, run and settle on
their own), started as a new interpreter (``python -m django delayq_worker
--supervised ...``): nothing is shared across a fork (database connections, Redis
sockets, locks held by a thread). Each child has a socket to the supervisor
(``worker/tracking.py``): it reports the jobs it holds and runs; the supervisor tells it to
drain or to stop; its end of file tells a child its supervisor is gone (it drains).

The supervisor

- restarts a child that exits, at once, or after a backoff (0.5 s doubling to 30 s) when
  children keep dying within ``STARTUP_S`` of their start; a child that exits with
  ``EXIT_CONFIG`` (bad settings) stops them all with that code;
- enforces hard time limits and cancels: a job running past its limit
  (``Settings.timeout_for``), or whose cancel was asked (``Job.cancel_requested``), gets
  its process SIGKILLed and its attempt recorded as timed out, or cancelled
  (``TakeBack``). A kill for one job touches no other (*drain, then kill*): a process
  that still runs or settles other jobs is told to drain (its unstarted jobs go back to
  Redis, uncharged), set aside and replaced at once (N + 1 processes for a while; with
  ``--metrics-port`` the replacement waits for its port), and killed once the doomed job
  is all it runs and its other jobs' rows are written (``Child.ripe``,
  ``Child.unwritten``); a doomed job that ends first is not killed. With
  ``--concurrency 1`` the kill is at once;
- kills a child whose beats fell silent (a job holding the GIL starves its beat and
  heartbeat threads; a Redis stall does not stop its beats: ``tracking.Link``) while it
  holds jobs, ``silence_allowed_s`` after its last beat (read after draining its socket), a
  margin before its leases lapse: so no other worker takes its jobs over while it still
  runs them. Its running jobs fail as a lapsed lease would fail them, the others are
  handed back (``TakeBack``);
- recycles: a child that claimed ``--max-jobs-per-child`` jobs finishes them and exits;
  one whose resident memory passes ``--max-memory-per-child`` MB (looked at every
  second, once it has started a job) is told to drain; either is replaced;
- forwards SIGTERM/SIGINT: the first tells every child to drain (it exits when they all
  have: ``EXIT_OK``), the second to stop hard (``EXIT_HARD_STOP``, also when a child
  stopped hard on its own meanwhile: two signals sent to it); a child still there
  ``HARD_STOP_S`` after that is SIGKILLed and its jobs taken back. It never leaves a child
  behind. A signal sent to the whole process group (Ctrl-C, systemd's
  ``KillMode=control-group``) reaches each child too: a child counts only the signals
  sent to it, never this drain (``Worker.request_stop``); one still starting (Django
  loading) or already exiting dies by it, which during the stop counts as clean unless
  it held a running job (``_count_stop_exit``). Each child asks the kernel for
  ``SIGHUP`` should the supervisor die (``worker/tracking.py``: it drains; one stuck
  holding the GIL is ended by its dead man's switch).
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

from django.db import close_old_connections

from django_delayq.engine.logtext import logged, shown
from django_delayq.models import Job
from django_delayq.worker import tracking
from django_delayq.worker.audit import AuditWriter, OutageLog
from django_delayq.worker.processes.children import Child, TakeBack, describe_exit, rss_mb
from django_delayq.worker.tracking import EXIT_CONFIG, EXIT_ERROR, EXIT_HARD_STOP, EXIT_OK

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.worker.ledger import Key

logger = logging.getLogger(__name__)

HARD_STOP_S = 10.0
STARTUP_S = 10.0  # a child that dies sooner than this crashed at start: back off
CHECK_S = 1.0  # cancel requests and memory, looked at this often
TICK_S = 0.25  # the longest wait of the loop
AWAY_S = 1.0  # a round this late: the supervisor itself was stopped or slow
REPORTS_S = 0.01  # after reading reports, the next read waits this long (a batch)
# a signal sent to the whole group ended it (before its relay acted on it: Django loading,
# or Python's shutdown); an uncaught KeyboardInterrupt: -2, or 130 when CPython cannot
# end itself by SIGINT; 1 when it lands while the interpreter starts (``site``): counted
# so only before the child's hello, after a SIGINT (``_count_stop_exit``)
SIGNAL_DEATHS = (-signal.SIGTERM, -signal.SIGINT, 128 + signal.SIGINT)


def silence_allowed_s(lease_s: float) -> float:
    """How long a child holding jobs may go without a heartbeat: its lease less a margin
    of a fifth of it (at least 1 s) for the kill and the take-back, never under half
    the lease. Its heartbeats come every third of a lease: over two of them missed."""
    return max(lease_s / 2, lease_s - max(1.0, lease_s / 5))


@dataclass(frozen=True, slots=True, kw_only=True)
class SupervisorOptions:
    processes: int
    child_argv: Sequence[str]  # the command line of a child, less --supervised
    burst: bool = False  # a child that exits 0 is done, not replaced (unless recycled)
    max_jobs_per_child: int | None = None  # passed to each child as --max-jobs
    max_memory_mb: float | None = None
    worker_id: str | None = None  # children are <worker_id>-1, -2, ... (one per start)
    metrics_port: int | None = None  # child of slot i serves on metrics_port + i
    metrics_addr: str = "127.0.0.1"


class Supervisor:
    def __init__(self, engine: Engine, settings: Settings, options: SupervisorOptions) -> None:
        self.engine, self.settings, self.options = engine, settings, options
        self.id = "%s:%d:sup-%s" % (socket.gethostname(), os.getpid(), uuid.uuid4().hex[:6])
        self.audit = AuditWriter(settings.audit_flush_seconds, settings.audit_batch)
        self.takeback = TakeBack(engine, settings, self.audit)
        self.silence_s = silence_allowed_s(settings.lease_ms / 1000)
        # every live child: one per slot, and those set aside (``Child.aside``)
        self.children: list[Child] = []
        # the slots to keep a child in, and when the next may start (a slot whose child
        # is done under --burst is left empty: dropped)
        self.next_start: dict[int, float] = dict.fromkeys(range(options.processes), 0.0)
        self.crashes: dict[int, int] = dict.fromkeys(range(options.processes), 0)
        self.signals = 0
        self.sigint = False  # one of them was SIGINT (Ctrl-C)
        self.code = EXIT_OK
        self.stop_deadline: float | None = None
        self._acted_on = 0
        self._next_check = 0.0
        self._judged_at = time.monotonic()  # the last look at the children's beats
        self._spawned = 0
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._rows_outage = OutageLog(logger, "supervisor: reading the rows of the jobs of "
                                      "a worker process to be killed")

    # -- signals: flags only ---------------------------------------------------------

    def install_signal_handlers(self) -> None:
        self._wake_w.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        self.sigint = self.sigint or signum == signal.SIGINT

    # -- lifecycle -------------------------------------------------------------------

    def run(self) -> int:
        logger.info("supervisor %s starting %d worker process(es)", self.id, self.options.processes)
        self.audit.start()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        try:
            while self._round():
                pass
        finally:
            self._leave_no_child()
            self.audit.stop()
        logger.info("supervisor %s stopped (exit %d)", self.id, self.code)
        return self.code

    def _round(self) -> bool:
        """One round of the loop; False once every child is gone and none will start."""
        self._act_on_signals()
        if not self._stopping():
            self._start_children()
        if not self.children and (self._stopping() or not self.next_start):
            return False
        self._wait()
        for child in list(self.children):  # reap those that exited
            if (code := child.proc.poll()) is not None:
                self._gone(child, code)
        now = time.monotonic()
        self._enforce_limits(now)
        self._enforce_heartbeats(now)
        if now >= self._next_check:
            self._next_check = now + CHECK_S
            self._check_cancels()
            self._check_memory()
        self._kill_ripe()
        if self.stop_deadline is not None and now >= self.stop_deadline:
            for child in self.children:
                child.kill({})
        return True

    def _stopping(self) -> bool:
        return self.signals > 0 or self.code == EXIT_CONFIG

    def _act_on_signals(self) -> None:
        if self.signals == self._acted_on:
            return
        if self._acted_on == 0:
            for child in self.children:
                child.drain()
            logged(logger.info, "supervisor: draining %d worker process(es)", len(self.children))
        if self.signals >= 2 and self.stop_deadline is None:
            logged(logger.warning, "supervisor: hard stop")
            self.code = EXIT_HARD_STOP
            self.stop_deadline = time.monotonic() + HARD_STOP_S
            for child in self.children:
                child.tell("stop")
        self._acted_on = self.signals

    # -- children --------------------------------------------------------------------

    def _start_children(self) -> None:
        """A child for each slot without one whose start time has come. A child set aside
        leaves its slot at once, or, when the slot's metrics port is its, once it is gone."""
        now = time.monotonic()
        taken = {c.slot for c in self.children
                 if not c.aside or self.options.metrics_port is not None}
        for slot, at in self.next_start.items():
            if at <= now and slot not in taken:
                try:
                    self._spawn(slot)
                except OSError as exc:  # out of processes or file descriptors
                    logger.error("supervisor: cannot start a worker process: %s", shown(exc))
                    self.next_start[slot] = now + 5.0

    def _argv(self, slot: int, fd: int) -> list[str]:
        opts = self.options
        self._spawned += 1
        argv = [*opts.child_argv, "--supervised",
                tracking.Supervision.encode(fd, opts.processes, self.id, os.getpid())]
        if opts.worker_id is not None:
            argv += ["--worker-id", "%s-%d" % (opts.worker_id, self._spawned)]
        if opts.metrics_port is not None:
            argv += ["--metrics-port", str(opts.metrics_port + slot),
                     "--metrics-addr", opts.metrics_addr]
        return argv

    def _spawn(self, slot: int) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            # abspath normalises ".." without following symlinks, as Path cannot
            [os.path.abspath(p or ".") for p in sys.path]))  # noqa: PTH100
        proc = subprocess.Popen(self._argv(slot, theirs.fileno()), env=env,
                                pass_fds=(theirs.fileno(),))
        theirs.close()
        ours.setblocking(False)
        child = Child(slot=slot, proc=proc, sock=ours)
        self.children.append(child)
        self._selector.register(ours, selectors.EVENT_READ, child)
        logger.info("supervisor: worker process %d started (slot %d)", proc.pid, slot)

    def _wait(self) -> None:
        now = time.monotonic()
        deadlines = (c.next_deadline(self.silence_s) for c in self.children if not c.killed)
        timeout = min([TICK_S, *(max(0.0, d - now + 0.01) for d in deadlines if d is not None)])
        reports = False
        for key, _ in self._selector.select(timeout):
            if key.data is None:
                with contextlib.suppress(BlockingIOError):
                    self._wake_r.recv(512)
            else:
                key.data.read()
                reports = True
        if reports:  # children send each start at once: let the next ones gather, so a
            time.sleep(min(REPORTS_S, timeout))  # round reads a batch, not one job

    def _gone(self, child: Child, code: int) -> None:
        child.read_all()
        running = len(child.running) + len(child.ended)  # started, not settled: its reports
        self._selector.unregister(child.sock)
        child.sock.close()
        self.children.remove(child)
        try:
            self.takeback.child_gone(child, code)
        except Exception:  # noqa: BLE001 - Redis or the database down: the leases expire
            logger.exception("supervisor: could not take back the jobs of worker process "
                             "%d; their leases will expire", child.pid)
            close_old_connections()
        bad = code not in (EXIT_OK, EXIT_HARD_STOP) and not child.killed_for  # on its own
        if self._stopping():
            bad = self._count_stop_exit(child, code, bad, running)
        self._after_exit(child, code, bad)

    def _count_stop_exit(self, child: Child, code: int, bad: bool, running: int) -> bool:
        """During the supervisor's stop: how ``child``'s exit counts toward its exit code
        (the first that is not clean sets it), logged. A death by SIGTERM or SIGINT holding
        no running job (its reports say) is clean: it was starting, idle, or exiting
        already; holding one, it is a hard stop. Exit 1 before its hello, after a SIGINT,
        is taken for a ``KeyboardInterrupt`` while Python started. Returns whether it is a
        failure."""
        interrupted = code == EXIT_ERROR and self.sigint and not child.worker_id
        if (code in SIGNAL_DEATHS or interrupted) and not child.killed_for:
            counted, why = ((EXIT_HARD_STOP, "holding %d running job(s): a hard stop" % running)
                            if running else (EXIT_OK, "holding no running job: a clean stop"))
            why = ("exit 1 before its hello, after a SIGINT (a KeyboardInterrupt while "
                   "Python started), " if interrupted else "a signal's death, ") + why
            bad = False
        elif code == EXIT_HARD_STOP or (child.killed and not child.killed_for):
            counted, why = EXIT_HARD_STOP, "a hard stop"
        elif bad:
            counted, why = EXIT_ERROR, "a failure"
        else:
            counted, why = EXIT_OK, "a clean stop"
        logger.info("supervisor: worker process %d ended during the stop (%s, code %d), "
                    "counted as %s (exit %d)", child.pid, describe_exit(code), code, why,
                    counted)
        if self.code == EXIT_OK:
            self.code = counted
        return bad

    def _after_exit(self, child: Child, code: int, bad: bool) -> None:
        how = describe_exit(code)
        if child.aside:  # replaced already, unless its metrics port was in the way (then now)
            logger.log(logging.WARNING if bad else logging.INFO,
                       "supervisor: worker process %d ended (%s)", child.pid, how)
            return
        if code == EXIT_CONFIG:
            logger.error("supervisor: worker process %d: bad settings (%s); stopping",
                         child.pid, how)
            self.code = EXIT_CONFIG
            for other in self.children:
                other.tell("drain")
            return
        if self._stopping():  # a bad exit meanwhile set EXIT_ERROR (``_gone``)
            return
        if code == EXIT_OK and self.options.burst and not self._recycled(child):
            logger.info("supervisor: worker process %d done", child.pid)
            self.next_start.pop(child.slot, None)
            return
        slot, delay = child.slot, 0.0
        if code == EXIT_OK or child.killed_for or time.monotonic() - child.started >= STARTUP_S:
            self.crashes[slot] = 0
        else:
            self.crashes[slot] += 1
            delay = min(0.5 * 2 ** (self.crashes[slot] - 1), 30.0)
        level = logging.INFO if code == EXIT_OK or child.killed_for else logging.WARNING
        logger.log(level, "supervisor: worker process %d ended (%s); a new one starts in "
                   "%.1fs", child.pid, how, delay)
        self.next_start[slot] = time.monotonic() + delay

    def _recycled(self, child: Child) -> bool:
        """Did ``child`` exit to be replaced (max jobs, memory), not because it was done?"""
        most = self.options.max_jobs_per_child
        return child.draining or (most is not None and child.claimed >= most)

    # -- limits, cancels, memory -------------------------------------------------------

    def _enforce_limits(self, now: float) -> None:
        for child in self.children:
            if not child.killed and (overdue := child.overdue(now)):
                self._doom(child, dict.fromkeys(overdue, TakeBack.TIMED_OUT),
                           "job(s) %s past their time limit"
                           % ", ".join(shown(i) for _, i in overdue))

    def _enforce_heartbeats(self, now: float) -> None:
        away = now - self._judged_at > AWAY_S
        self._judged_at = now
        for child in self.children:
            if away:  # this supervisor was stopped or slow: the silence may be its own (its
                child.leases_since = max(child.leases_since, now)  # socket backed up)
            if child.silent(now, self.silence_s):
                child.read_all()  # its newest beat may wait unread behind other reports
            if child.silent(now, self.silence_s):
                logger.error("supervisor: worker process %d holds %d job(s) and its heartbeat "
                             "has been silent for %.1fs (a job holding the GIL?): killing it "
                             "before its leases lapse", child.pid, len(child.held),
                             now - child.leases_since)
                child.kill(dict.fromkeys(child.held, TakeBack.SILENT))

    def _check_cancels(self) -> None:
        running = {key[1]: (child, key) for child in self.children if not child.killed
                   for key in child.running if key not in child.doomed}
        try:  # none running: no query
            asked = list(Job.objects.filter(pk__in=list(running), cancel_requested=True)
                         .values_list("pk", flat=True))
        except Exception as exc:  # noqa: BLE001 - the database is down: look again later
            logger.warning("supervisor: could not read cancel requests: %s", shown(exc))
            close_old_connections()
            return
        for job_id in asked:
            child, key = running[job_id]
            if not child.killed:
                self._doom(child, {key: TakeBack.CANCELLED},
                           "job %s cancelled while it runs" % shown(job_id))

    def _doom(self, child: Child, why: dict[Key, str], what: str) -> None:
        """Kill ``child`` for the jobs of ``why`` (job key -> why) as soon as that cuts
        no other job short: now when it is ripe; else drain it, set it aside and start
        its replacement (``_kill_ripe`` kills it once ripe)."""
        child.doomed.update(why)
        if self._kill_if_ripe(child, "supervisor: %s: killing worker process %%d"
                              % what.replace("%", "%%")):  # a format of one argument
            return
        logger.warning("supervisor: %s: worker process %d stops claiming and is killed once "
                       "its %d other job(s) are done", what, child.pid,
                       len(set(child.running) | set(child.ended)) - len(child.doomed_running()))
        child.drain()
        child.aside = True  # a process takes its place (``_start_children``)

    def _kill_ripe(self) -> None:
        for child in self.children:
            if child.aside and not child.killed and child.ripe():
                self._kill_if_ripe(child, "supervisor: worker process %d runs only the job(s) "
                                          "it is killed for now: killing it")

    def _kill_if_ripe(self, child: Child, message: str) -> bool:
        """Kill ``child`` (logging ``message`` % its pid) when, by its latest reports (a job
        that ended, one that started), it is ripe and the rows of the jobs it settled are
        written (not when the database cannot say: the doomed job runs on, its lease
        extended, until it can). Whether it was killed."""
        child.read_all()
        if not child.ripe():
            return False
        try:
            unwritten = child.unwritten()
        except Exception as exc:  # noqa: BLE001 - the database is down: look again later
            self._rows_outage.failed(exc, TICK_S)
            close_old_connections()
            return False
        self._rows_outage.ok()
        if not unwritten:
            logger.warning(message, child.pid)
            child.kill(child.doomed_running())
        return not unwritten

    def _check_memory(self) -> None:
        limit = self.options.max_memory_mb
        for child in self.children:
            if limit is None or child.draining or not child.runs:  # one over at start would
                continue  # never run a job
            used = rss_mb(child.pid)
            if used is not None and used > limit:
                logger.info("supervisor: worker process %d uses %.0f MB (over %g): recycling",
                            child.pid, used, limit)
                child.drain()

    def _leave_no_child(self) -> None:
        """On the way out (also after an error of ours): no child outlives us."""
        for child in self.children:
            child.kill({})
        for child in list(self.children):
            self._gone(child, child.proc.wait())
