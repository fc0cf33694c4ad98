"""One child worker process as its supervisor sees it: the process, its socket, and the
jobs it holds as its reports say (``worker/tracking.py`` describes them).

``held`` is every job the child claimed and has neither settled (acked or nacked in
Redis) nor handed back; ``running`` the ones a thread runs, with their start (monotonic,
one clock for every process of the host) and time limit; ``ended`` the ones that
finished and wait to be settled (still held: a kill now would lose their outcome);
``settled`` the last ones it settled in Redis, whose audit rows (and attempt rows) it may
not have written yet (its audit writer flushes every ``AUDIT_FLUSH_SECONDS``).

A job that must be stopped (cancelled while it runs, or past its time limit) is
*doomed* (``doomed``: job key -> why). The process is killed for it only once it is
``ripe`` (every job it still runs or has yet to settle is a doomed one still running)
and the rows of the jobs it settled have landed (``unwritten``, read in the database by
the supervisor). Until then the supervisor keeps it draining (no new claims), so no
other job of it is cut short or loses its record; a doomed job that ends on its own
first is not killed at all. What the supervisor killed the child for is in
``killed_for`` (job key -> why), read once the process is gone. ``leases_since`` is
when its heartbeat last began (its ``b`` report; at first, its hello): every lease it
holds runs at least one lease from then, so a child that holds jobs and stays silent
for nearly a lease is about to lose them while it may still run them (``silent``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from django_delayq.engine.outcomes import ClaimedJob
from django_delayq.models import FINAL_STATUSES, Job, JobAttempt
from django_delayq.worker.tracking import EXIT_HARD_STOP, RunningJob

if TYPE_CHECKING:
    from django_delayq.worker.ledger import Key

logger = logging.getLogger(__name__)

STARTUP_S = 10.0  # a child that dies sooner than this crashed at start: back off
MB = 1024 * 1024
SETTLED_KEPT = 512  # the jobs a child settled last, whose rows a kill waits for


@dataclass(frozen=True, slots=True)
class Settled:
    key: Key
    attempt: int  # its number in the row and its JobAttempt
    failed: bool  # a failed attempt (retried, dead, cancelled): it has an attempt row


@dataclass(slots=True, kw_only=True)
class Child:
    slot: int
    proc: subprocess.Popen[bytes]
    sock: socket.socket
    started: float = field(default_factory=time.monotonic)
    worker_id: str = ""
    held: dict[Key, ClaimedJob] = field(default_factory=dict)
    running: dict[Key, RunningJob] = field(default_factory=dict)
    ended: dict[Key, RunningJob] = field(default_factory=dict)  # finished, not settled yet
    settled: deque[Settled] = field(default_factory=lambda: deque(maxlen=SETTLED_KEPT))
    doomed: dict[Key, str] = field(default_factory=dict)  # to be killed for (why)
    aside: bool = False  # doomed and draining: out of its slot, killed once ripe
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

    def read(self) -> bool:
        """Read what the child sent; False when nothing is there, or at end of file (it
        exited or is exiting)."""
        try:
            data = self.sock.recv(65536)
        except OSError:  # BlockingIOError: nothing there
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
        while self.read():
            pass

    def _apply(self, line: bytes) -> None:
        fields = line.decode(errors="replace").split("\t")
        try:
            self._event(fields[0], fields[1:])
        except (ValueError, IndexError, KeyError):
            logger.warning("child %d: unreadable report %r", self.pid, line[:200])

    def _event(self, kind: str, f: list[str]) -> None:
        if kind == "b":
            self.leases_since = max(self.leases_since, float(f[0]))
            return
        if kind == "h":
            self.worker_id = f[1]
            self.leases_since = time.monotonic()  # before its first claim
            return
        key = (f[0], f[1])
        if kind == "c":
            self.claimed += 1
            self.held[key] = ClaimedJob(
                queue=f[0], id=f[1], token=int(f[2]), due_ms=int(f[3]), envelope="",
                attempt=int(f[4]) if len(f) > 4 else 0, home=f[5] if len(f) > 5 else "")
        elif kind == "s":  # the wall clock of its start: one the ledger's record needs
            self.runs += 1
            started = float(f[3])
            at = datetime.now(UTC) - timedelta(seconds=time.monotonic() - started)
            self.running[key] = RunningJob(self.held[key], started, at,
                                           float(f[4]) if f[4] else None)
        elif kind == "e":
            run = self.running.pop(key, None)
            if run is not None and key in self.held:
                self.ended[key] = run
        elif kind == "x":
            self.ended.pop(key, None)
            self.held.pop(key, None)
            if f[3] != "d":  # a deferred job's row is not touched
                self.settled.append(Settled(key, int(f[2]), f[3] == "f"))
        elif kind == "r":
            self.held.pop(key, None)

    # -- decisions ------------------------------------------------------------------

    def overdue(self, now: float) -> list[Key]:
        """Running jobs past their time limit at ``now`` (monotonic), not doomed yet."""
        return [key for key, run in self.running.items()
                if run.over(now) and key not in self.doomed]

    def doomed_running(self) -> dict[Key, str]:
        """The doomed jobs still running (job key -> why)."""
        return {key: why for key, why in self.doomed.items() if key in self.running}

    def ripe(self) -> bool:
        """May it be killed now? Only when a doomed job still runs and every job it runs
        or has yet to settle is a doomed one: no other job's run or outcome is lost.
        Jobs it holds unstarted do not count (handed back, no attempt charged)."""
        doomed = self.doomed_running()
        return bool(doomed) and all(key in doomed for key in [*self.running, *self.ended])

    def silent(self, now: float, allowed_s: float) -> bool:
        """It holds jobs and its heartbeat has been silent for over ``allowed_s``."""
        return bool(self.held) and not self.killed and now - self.leases_since > allowed_s

    def next_deadline(self, allowed_s: float) -> float | None:
        """The next time limit of its running jobs, or the end of its allowed silence
        (``allowed_s``, while it holds jobs), whichever comes first."""
        ends = [run.started_mono + run.limit for key, run in self.running.items()
                if run.limit is not None and key not in self.doomed]
        if self.held:
            ends.append(self.leases_since + allowed_s)
        return min(ends, default=None)

    def unwritten(self) -> bool:
        """Is a row of a job it settled not written yet (so a kill now would lose it)?
        Reads the rows (and attempt rows) in the database; each found written is
        forgotten. Raises when the database cannot be read."""
        if not self.settled:
            return False
        ids = [s.key[1] for s in self.settled]
        rows = {pk: (status, attempts) for pk, status, attempts in
                Job.objects.filter(pk__in=ids).values_list("pk", "status", "attempts")}
        tried = set(JobAttempt.objects.filter(
            job_id__in=[s.key[1] for s in self.settled if s.failed])
            .values_list("job_id", "number"))
        left = [s for s in self.settled if not _written(s, rows.get(s.key[1]), tried)]
        self.settled.clear()
        self.settled.extend(left)
        return bool(left)

    def drain(self) -> None:
        """Tell it to drain (stop claiming, finish, exit), once."""
        if not self.draining:
            self.draining = True
            self.tell("drain")

    def tell(self, word: str) -> None:
        """Send ``drain`` or ``stop``; a child that is gone cannot hear it."""
        with contextlib.suppress(OSError):
            self.sock.sendall(word.encode() + b"\n")

    def kill(self, reasons: dict[Key, str]) -> None:
        """SIGKILL the process for ``reasons`` (job key -> why)."""
        self.killed_for.update(reasons)
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def _written(s: Settled, row: tuple[str, int] | None, tried: set[tuple[str, int]]) -> bool:
    """Has the outcome ``s`` landed in its row ``(status, attempts)``? A later attempt, or
    a deleted row, counts as landed."""
    if row is None or row[1] > s.attempt:
        return True
    if s.failed:
        return (s.key[1], s.attempt) in tried
    return row[0] in FINAL_STATUSES


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
        import psutil  # optional: when installed, else /proc
    except ImportError:
        try:
            pages = int(Path("/proc/%d/statm" % pid).read_text().split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return pages * os.sysconf("SC_PAGE_SIZE") / MB
    try:
        return float(psutil.Process(pid).memory_info().rss) / MB
    except psutil.Error:
        return None


def can_measure_memory() -> bool:
    return rss_mb(os.getpid()) is not None
