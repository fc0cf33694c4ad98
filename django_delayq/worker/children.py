"""One child worker process as its supervisor sees it: the process, its socket, and the
jobs it holds as its reports say (``tracking.py`` describes them).

``held`` is every job the child claimed and has neither finished nor handed back;
``running`` the ones a thread runs, with their start (monotonic, one clock for every
process of the host) and time limit. What the supervisor decided to kill the child for
is in ``killed_for`` (job key -> why), read once the process is gone. ``leases_since``
is when its heartbeat last began (its ``b`` report; at first, its hello): every lease
it holds runs at least one lease from then, so a child that holds jobs and stays silent
for nearly a lease is about to lose them while it may still run them (``silent``).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field

from django_delayq.engine import ClaimedJob
from django_delayq.worker.ledger import Key
from django_delayq.worker.loop import EXIT_HARD_STOP

logger = logging.getLogger(__name__)

STARTUP_S = 10.0  # a child that dies sooner than this crashed at start: back off
MB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    started: float  # monotonic
    limit: float | None


@dataclass(slots=True, kw_only=True)
class Child:
    slot: int
    proc: subprocess.Popen[bytes]
    sock: socket.socket
    started: float = field(default_factory=time.monotonic)
    worker_id: str = ""
    held: dict[Key, ClaimedJob] = field(default_factory=dict)
    running: dict[Key, Run] = field(default_factory=dict)
    killed_for: dict[Key, str] = field(default_factory=dict)
    draining: bool = False  # told to drain (recycled, or the supervisor stops)
    killed: bool = False  # SIGKILL sent
    runs: int = 0  # jobs it started
    claimed: int = 0  # jobs it claimed
    leases_since: float = field(default_factory=time.monotonic)  # its last heartbeat
    buffer: bytes = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    # -- reports -----------------------------------------------------------------

    def read(self, *, wait: bool = True) -> bool:
        """Read what the child sent; False at end of file (it exited or is exiting), or
        when nothing is there and ``wait`` is False."""
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return wait
        except OSError:
            return False
        if not data:
            return False
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            self._apply(line)
        return True

    def read_all(self) -> None:
        """Everything left in the socket (the process is gone; a process it started may
        still hold its end, so stop when nothing is there)."""
        while self.read(wait=False):
            pass

    def _apply(self, line: bytes) -> None:
        fields = line.decode(errors="replace").split("\t")
        try:
            self._event(fields[0], fields[1:])
        except (ValueError, IndexError):
            logger.warning("child %d: unreadable report %r", self.pid, line[:200])

    def _event(self, kind: str, f: list[str]) -> None:
        if kind == "c":
            self.claimed += 1
            self.held[(f[0], f[1])] = ClaimedJob(queue=f[0], id=f[1], token=int(f[2]),
                                                 due_ms=int(f[3]), envelope="")
        elif kind == "s":
            self.runs += 1
            self.running[(f[0], f[1])] = Run(started=float(f[3]),
                                             limit=float(f[4]) if f[4] else None)
        elif kind == "e":
            self.running.pop((f[0], f[1]), None)
            self.held.pop((f[0], f[1]), None)
        elif kind == "r":
            self.held.pop((f[0], f[1]), None)
        elif kind == "b":
            self.leases_since = max(self.leases_since, float(f[0]))
        elif kind == "h":
            self.worker_id = f[1]
            self.leases_since = time.monotonic()  # before its first claim

    # -- decisions ------------------------------------------------------------------

    def overdue(self, now: float) -> list[Key]:
        """Running jobs past their time limit at ``now`` (monotonic)."""
        return [key for key, run in self.running.items()
                if run.limit is not None and now - run.started > run.limit]

    def silent(self, now: float, allowed_s: float) -> bool:
        """It holds jobs and its heartbeat has been silent for over ``allowed_s``."""
        return bool(self.held) and not self.killed and now - self.leases_since > allowed_s

    def next_deadline(self, allowed_s: float | None = None) -> float | None:
        """The next time limit of its running jobs, or the end of its allowed silence
        (``allowed_s``, while it holds jobs), whichever comes first."""
        ends = [run.started + run.limit for run in self.running.values()
                if run.limit is not None]
        if allowed_s is not None and self.held:
            ends.append(self.leases_since + allowed_s)
        return min(ends, default=None)

    def tell(self, word: str) -> None:
        """Send ``drain`` or ``stop``; a child that is gone cannot hear it."""
        try:
            self.sock.sendall(word.encode() + b"\n")
        except OSError:
            pass

    def kill(self, reasons: dict[Key, str]) -> None:
        """SIGKILL the process for ``reasons`` (job key -> why)."""
        self.killed_for.update(reasons)
        self.killed = True
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def quick_death(self) -> bool:
        return time.monotonic() - self.started < STARTUP_S

    def close(self) -> None:
        self.sock.close()


def describe_exit(code: int) -> str:
    if code == EXIT_HARD_STOP:
        return "stopped hard"
    if code < 0:
        try:
            return "killed by %s" % signal.Signals(-code).name
        except ValueError:
            return "killed by signal %d" % -code
    return "exit %d" % code


def rss_mb(pid: int) -> float | None:
    """The resident memory of process ``pid`` in MB (psutil when installed, else
    /proc); None when it cannot be read."""
    try:
        import psutil
    except ImportError:
        try:
            with open("/proc/%d/statm" % pid) as f:
                pages = int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return pages * os.sysconf("SC_PAGE_SIZE") / MB
    try:
        return float(psutil.Process(pid).memory_info().rss) / MB
    except psutil.Error:
        return None


def can_measure_memory() -> bool:
    return rss_mb(os.getpid()) is not None
