"""What a worker runs, told to its registry entry and, under a supervisor, to the supervisor.

The ``Ledger`` keeps a record of each running job (queue, callable, start time, time
limit): the heartbeat publishes it (``"jobs"`` in the registry info). A worker started by
``delayq_worker --processes`` (a *child*) has a ``Link``, a socket to the supervisor, over
which its ledger also reports every transition of its jobs, one line each:

    h <pid> <worker id>                        once, at start
    b <at>                                     the heartbeat thread ran at ``at``
                                               (monotonic s), sent once its leases
                                               were extended (``housekeeping.py``)
    c <queue> <id> <token> <due_ms> <attempt> <home>   a job claimed (one line per job;
                                               home: the shard holding it, or empty)
    s <queue> <id> <token> <at> <limit> <attempt>  started at ``at`` (monotonic s); limit
                                               in s, empty for none; its attempt number
                                               (a copy whose claim the supervisor missed
                                               is recorded with it, not its token)
    e <queue> <id> <token>                     ended (its outcome is settled next;
                                               still held until then)
    x <queue> <id> <attempt> <how> <token>     settled in Redis: no longer held; how:
                                               s acked, f nacked (an attempt row
                                               follows), d deferred (row untouched)
    r <queue> <id> <token>                     handed back unstarted (drain), or
                                               dropped unstarted (its lease lost)

``e``, ``x`` and ``r`` name the delivery (its token): after a lost lease the child may
hold a newer copy of the same job (claimed since) while the stale one ends; the
supervisor's record of the newer copy stays.

fields separated by tabs (queue names are printable, ids are ours: neither holds a tab or
a newline; a line that does not parse is ignored). Text, not JSON: the supervisor reads
two lines per job.

Reports leave in batches, at most ``FLUSH_S`` after the transition (one wake-up of the
supervisor per batch, not per job). So the supervisor knows, within milliseconds, the
jobs a child holds, which of them run since when, and which finished but are not settled
yet: it can kill a child whose job overruns its time limit once no other job of it still
runs or waits to be settled (``processes/supervisor.py``).
``time.monotonic`` is one clock for every process of a host. A report lost with a
process that died (its last ``FLUSH_S``) leaves that job to its lease, as for any dead
worker.

A job's start report leaves at once, before its function is called, and so does each
heartbeat: a job that holds the GIL from its first line starves every other thread of
the process (the batch flusher too), and the supervisor must still know it runs, and
that the heartbeat fell silent. The supervisor SIGKILLs a child whose heartbeat stays
silent, with jobs held, until its leases are about to lapse (``processes/supervisor.py``).

**When the supervisor dies.** The child asks the kernel for ``SIGHUP`` when its parent
dies (``PR_SET_PDEATHSIG``, Linux); its handler drains, as the end of file of the link
does. A child stuck in a C call holding the GIL runs neither: for it, a *dead man's
switch* (``DeadMan``) is armed while a job runs: ``ITIMER_REAL`` set to two leases,
pushed back by every heartbeat. Nothing handles ``SIGALRM``, so when the heartbeat
stops for two leases the kernel ends the process by the signal's default action, no
GIL needed. Under a live supervisor the silent child is killed (and its jobs taken
back) sooner, before its leases lapse; the switch is for an orphan. A job that sets
``ITIMER_REAL`` or handles ``SIGALRM`` itself takes the switch over (it is armed only
while ``SIGALRM`` has its default action).

The supervisor writes one word a line back: ``drain`` (stop claiming, finish, exit) or
``stop`` (the hard stop). End of file means the supervisor is gone: the child drains,
and, with nobody left to enforce its time limits, exits at once (leases left to expire)
when a running job overruns its limit. Under a supervisor the limits are hard: the child
fails no attempt on its own (``Ledger.time_out_limits`` finds nothing).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_delayq.engine.logtext import shown

if TYPE_CHECKING:
    from django_delayq.engine.outcomes import ClaimedJob

logger = logging.getLogger(__name__)

FLUSH_S = 0.01
TICK_S = 0.5  # the child's beats, independent of the lease extends
# A worker process's exit codes (``loop.Worker.run``), which its supervisor reads.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_HARD_STOP = 3
DEAD_MAN_LEASES = 2.0  # an orphan stuck this many leases without a heartbeat is ended
PR_SET_PDEATHSIG = 1  # linux/prctl.h
ORPHAN_SIGNAL = signal.SIGHUP  # sent by the kernel when the supervisor dies: drain


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job a thread runs: since when (monotonic; wall clock) and its time limit in
    seconds (None: none)."""

    job: ClaimedJob
    started_mono: float
    started_at: datetime
    limit: float | None

    def over(self, now: float) -> bool:
        """Has it reached its time limit at ``now`` (monotonic)?"""
        return self.limit is not None and self.started_mono + self.limit <= now

    def info(self) -> dict[str, Any]:
        return {"id": self.job.id, "queue": self.job.queue,
                "callable": getattr(self.job.payload, "path", ""),
                "started_ms": int(self.started_at.timestamp() * 1000)}


def next_limit(runs: Iterable[RunningJob]) -> float | None:
    """The earliest moment (monotonic) one of ``runs`` reaches its time limit."""
    return min((r.started_mono + r.limit for r in runs if r.limit is not None), default=None)


def set_parent_death_signal(signum: int) -> bool:
    """Ask the kernel for ``signum`` when this process's parent dies (Linux only; the
    parent must be the supervisor's main thread, which lives as long as it does)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(
            PR_SET_PDEATHSIG, int(signum), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class DeadMan:
    """``ITIMER_REAL`` as a dead man's switch: armed while a job runs, pushed back by each
    heartbeat, disarmed when no job runs. ``SIGALRM``'s default action ends the process
    in the kernel, so it works while a C call holds the GIL. Left alone when ``SIGALRM``
    has a handler or the platform has no ``setitimer``."""

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self._lock = threading.Lock()
        self._armed = False

    def arm(self, running: bool) -> None:
        """Armed once when the first job starts (each heartbeat pushes it back), disarmed
        when none runs: no system call per job while jobs keep running."""
        with self._lock:
            if running != self._armed:
                self._armed = self._set(self.horizon_s if running else 0.0) and running

    def rearm(self) -> None:
        with self._lock:
            if self._armed:
                self._set(self.horizon_s)

    @staticmethod
    def _set(seconds: float) -> bool:
        if not hasattr(signal, "setitimer") or \
                signal.getsignal(signal.SIGALRM) != signal.SIG_DFL:
            return False
        signal.setitimer(signal.ITIMER_REAL, seconds)
        return True


class Link:
    """The child's end of its socket to the supervisor."""

    def __init__(self, fd: int) -> None:
        os.set_inheritable(fd, False)  # a process a job starts must not keep it open
        self.sock = socket.socket(fileno=fd)
        self._lock = threading.Lock()  # the queued reports; never held across a send
        self._send_lock = threading.Lock()  # one sender at a time
        self._pending: list[bytes] = []
        self._ready = threading.Event()
        self.orphaned = threading.Event()
        self.dead_man = DeadMan(0.0)  # its horizon is set from the lease (the Worker)
        threading.Thread(target=self._flush_loop, name="delayq-link-out", daemon=True).start()
        threading.Thread(target=self._tick_loop, name="delayq-link-tick", daemon=True).start()

    def send(self, *fields: object) -> None:
        """Queue a report (its fields); they leave in batches, at most ``FLUSH_S`` later
        (one wake-up of the supervisor per batch, not per job)."""
        data = ("\t".join(map(str, fields)) + "\n").encode()
        with self._lock:
            self._pending.append(data)
        self._ready.set()

    def _flush_loop(self) -> None:
        while not self.orphaned.is_set():
            self._ready.wait()
            time.sleep(FLUSH_S)  # let the reports of this moment gather
            self._ready.clear()
            self.flush()

    def flush(self) -> None:
        """Send the queued reports now (also on the way out: the last ones count). A
        supervisor that stops reading blocks only the sender, never ``send``/``beat``."""
        with self._send_lock:
            with self._lock:
                data, self._pending = b"".join(self._pending), []
            if not data:
                return
            try:
                self.sock.sendall(data)
            except OSError:  # the supervisor is gone: the listener drains this worker
                self.orphaned.set()

    def beat(self, at: float) -> None:
        """This process's Python threads ran at ``at`` (monotonic): tell the supervisor
        (the sender thread sends it within ``FLUSH_S``) and push the dead man's switch
        back. Never blocks on the socket: the heartbeat thread (lease extends) calls it."""
        self.dead_man.rearm()
        self.send("b", repr(at))

    def _tick_loop(self) -> None:
        """A beat every ``TICK_S``, whatever Redis does: the supervisor's silence rule is
        about a job holding the GIL (which starves this thread too), not about a Redis
        stall shorter than the lease (which only delays the heartbeat's extends)."""
        while not self.orphaned.wait(TICK_S):
            self.beat(time.monotonic())

    def listen(self, on_drain: Callable[[str], None], on_stop: Callable[[str], None],
               running: Callable[[], list[RunningJob]]) -> None:
        """The listener thread (``delayq-link``): the supervisor's words, then its end
        (each callback is given why)."""
        for word in self._words():
            if word == "drain":
                on_drain("its supervisor asked")
            elif word == "stop":
                on_stop("its supervisor asked")
        self.orphaned.set()
        logger.warning("the supervisor is gone: draining")
        on_drain("its supervisor is gone")
        while True:  # nobody else enforces the time limits now
            over = [r for r in running() if r.over(time.monotonic())]
            if over:
                logger.error("job %s: past its %gs time limit with no supervisor to stop "
                             "it; exiting (its lease will expire)", shown(over[0].job.id),
                             over[0].limit)
                os._exit(EXIT_HARD_STOP)  # as a hard stop
            time.sleep(0.2)

    def _words(self) -> Iterator[str]:
        """The supervisor's words, one a line, until its end of file."""
        with contextlib.suppress(OSError):
            for line in self.sock.makefile("rb"):
                yield line.decode(errors="replace").strip()


@dataclass(frozen=True, slots=True, kw_only=True)
class Supervision:
    """How a child worker was started: its supervisor's id and pid, how many children it
    runs, its link. On the command line: ``--supervised FD:PROCESSES:PID:SUPERVISOR_ID``.
    Decoding it (in the child) asks the kernel for ``ORPHAN_SIGNAL`` when the supervisor
    dies."""

    supervisor_id: str
    processes: int
    link: Link
    parent_pid: int = 0

    @staticmethod
    def encode(fd: int, processes: int, supervisor_id: str, parent_pid: int) -> str:
        return "%d:%d:%d:%s" % (fd, processes, parent_pid, supervisor_id)

    @classmethod
    def decode(cls, spec: str) -> Supervision:
        fd, processes, parent_pid, supervisor_id = spec.split(":", 3)
        set_parent_death_signal(ORPHAN_SIGNAL)
        return cls(supervisor_id=supervisor_id, processes=int(processes), link=Link(int(fd)),
                   parent_pid=int(parent_pid))

    def orphaned(self) -> bool:
        """The supervisor died already (before the death signal was asked for)."""
        return os.getppid() != self.parent_pid
