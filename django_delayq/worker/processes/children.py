"""One child worker process as its supervisor sees it: the process, its socket, and the
jobs it holds as its reports say (``worker/tracking.py`` describes them); and, once it is
gone, the taking back of the jobs it still held (``TakeBack``).

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

from django_delayq.core import payloads
from django_delayq.engine.logtext import shown
from django_delayq.engine.outcomes import ClaimedJob
from django_delayq.engine.replies import grouped
from django_delayq.models import FINAL_STATUSES, Job, JobAttempt, JobStatus
from django_delayq.worker import runner
from django_delayq.worker.outcome import LEASE_LOST
from django_delayq.worker.settle import Settler
from django_delayq.worker.tracking import EXIT_HARD_STOP, EXIT_OK, RunningJob, next_limit

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.worker.audit import AuditWriter
    from django_delayq.worker.ledger import Key
    from django_delayq.worker.outcome import Outcome

logger = logging.getLogger(__name__)

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
                attempt=int(f[4]), home=f[5] if len(f) > 5 else "")
        elif kind == "s":  # its start: monotonic, and the instant its rows carry
            self.runs += 1
            started, token = float(f[3]), int(f[2])
            at = datetime.fromisoformat(f[6]) if len(f) > 6 else datetime.now(UTC) - timedelta(
                seconds=time.monotonic() - started)
            # its claim unseen: tracked all the same
            if (job := self.held.get(key)) is None or job.token != token:
                job = ClaimedJob(queue=f[0], id=f[1], token=token, due_ms=0, envelope="",
                                 attempt=int(f[5]))  # the attempt, never the token
            self.running[key] = RunningJob(job, started, at, float(f[4]) if f[4] else None)
        elif kind == "e":  # of that delivery: a stale copy (its lease lost) may end
            # while the redelivered copy runs
            if (run := self.running.get(key)) is not None and run.job.token == int(f[2]):
                del self.running[key]
                if key in self.held:
                    self.ended[key] = run
        elif kind == "x":
            self._forget(key, int(f[4]))
            if f[3] != "d":  # a deferred job's row is not touched
                self.settled.append(Settled(key, int(f[2]), f[3] == "f"))
        elif kind == "r":
            self._forget(key, int(f[2]))

    def _forget(self, key: Key, token: int) -> None:
        """Drop the entries of that delivery of the job, not those of a newer copy claimed
        before this report came (a retry due at once, a copy redelivered after a lost
        lease)."""
        if (run := self.ended.get(key)) is not None and run.job.token == token:
            del self.ended[key]
        if (held := self.held.get(key)) is not None and held.token == token:
            del self.held[key]

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
        ends = [next_limit(r for key, r in self.running.items() if key not in self.doomed)]
        if self.held:
            ends.append(self.leases_since + allowed_s)
        return min((end for end in ends if end is not None), default=None)

    def unwritten(self) -> bool:
        """Is a row of a job it settled not written yet (so a kill now would lose it)?
        Reads the rows (and attempt rows) in the database; each found written is
        forgotten. Raises when the database cannot be read (none settled: no query)."""
        ids = [s.key[1] for s in self.settled]
        rows = {pk: (status, attempts) for pk, status, attempts in
                Job.objects.filter(pk__in=ids).values_list("pk", "status", "attempts")}
        tried = set(JobAttempt.objects.filter(
            job_id__in=[s.key[1] for s in self.settled if s.failed])
            .values_list("job_id", "number"))
        left = [s for s in self.settled if not _written(s, rows.get(s.key[1]), tried)]
        self.settled = deque(left, maxlen=SETTLED_KEPT)
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


Failure = tuple[RunningJob, str]  # its run, why it failed


class TakeBack:
    """Taking back the jobs of a child worker process that is gone, without waiting for
    leases.

    When a child exits, its supervisor knows from its reports (``worker/tracking.py``)
    which jobs it still held. Each is settled at once, by what became of it:

    - the job the supervisor killed the child for: its attempt fails now, with
      ``error_type`` ``django_delayq.exceptions.JobTimeout`` (past its time limit; retried or
      dead by its policy) or as cancelled (its cancel was asked while it ran: ``nack`` finds
      the cancel mark, the job ends ``cancelled``, "cancelled while it ran", not retried).
      The supervisor kills a child for a job only once no other job of it runs or waits to
      be settled (``Child.ripe``), so no other job is cut short by that kill;
    - the running jobs of a child killed because its heartbeat fell silent (a job holding
      the GIL starves it) before its leases lapsed: their attempt fails with ``error_type``
      ``django_delayq.exceptions.LeaseLost``, as the lapsed lease would have (which job held
      the GIL cannot be told; each is retried or dead by its policy), but no other worker
      ran them meanwhile;
    - the running jobs of a child that died otherwise (on its own: killed by someone else,
      crashed, out of memory; or stopped hard), and those that finished but were not settled
      yet: their attempt fails with ``error_type`` ``django_delayq.exceptions.LeaseLost``,
      retried or dead by their policy, as an expired lease would be, only sooner: every run
      is charged its attempt and has its ``JobAttempt``, and a job that kills its process is
      not retried forever. A job that ran is never handed back uncharged;
    - jobs it held but had not started: handed back (``Engine.release``: due again at once,
      no attempt charged). After a clean exit (0: drained, recycled) the child settled
      everything itself; a report lost with it (the last ``tracking.FLUSH_S``) makes a job
      look held, and its release is refused by Redis.

    A job that ran and whose cancel was asked meanwhile is settled from its row's id, queue
    and callable (``payloads.read`` sorts it as *cancelled*, with no payload): ``nack`` ends
    it cancelled, its attempt recorded; it is never handed back to be settled later as
    "cancelled before it started".

    Redis decides, as for every settlement: a job the child settled after all (its report
    lost with the process) carries a token Redis no longer accepts, and is left alone. When
    Redis or the database is down, nothing is lost: the leases expire and recovery takes
    the jobs back as for any dead worker.
    """

    # why the supervisor kills a process for a job (``Child.doomed``, ``Child.killed_for``)
    TIMED_OUT = "timed out"
    CANCELLED = "cancelled"
    SILENT = "heartbeat silent"
    KILLED = {  # why -> (error_type, error) of the attempt its process was killed for
        CANCELLED: ("", "cancelled while it ran: its process was killed"),
        SILENT: (LEASE_LOST, "its worker process stopped heartbeating (a job holding the "
                 "GIL?): killed before its leases lapsed"),
    }

    def __init__(self, engine: Engine, settings: Settings, audit: AuditWriter) -> None:
        self.engine, self.settings, self.audit = engine, settings, audit

    def child_gone(self, child: Child, code: int) -> None:
        """Settle every job ``child`` (exited with ``code``) still held."""
        failed: list[Failure] = []
        back: list[ClaimedJob] = []
        for key, job in child.held.items():
            run = child.running.get(key) or child.ended.get(key)
            if run is None or run.job.token != job.token:  # a stale copy's run: not this one's
                back.append(job)
            elif code != EXIT_OK:  # after a clean exit it settled what it ran itself
                failed.append((run, why_failed(child, key, code)))
        self._settle(child, failed, back)

    def _outcome(self, job: ClaimedJob, run: RunningJob, why: str) -> Outcome:
        """The failure of ``run``, whose job (with its payload) is ``job``."""
        outcome = runner.timed_out(job, run.started_at, run.limit or 0.0)
        if why == self.TIMED_OUT:  # a failure of type JobTimeout, as timed_out made it
            outcome.error = ("timed out: still running after its %gs time limit; its "
                             "process was killed" % (run.limit or 0.0))
        else:
            outcome.error_type, outcome.error = self.KILLED.get(why) or (
                LEASE_LOST, "the worker process running it died (%s)" % why)
        return outcome

    def _settle(self, child: Child, failed: list[Failure], back: list[ClaimedJob]) -> None:
        loaded = payloads.read([run.job for run, _ in failed])  # none: no query
        # one cancelled while it ran is settled, never handed back
        usable = {job.id: job for job in [*loaded.run, *loaded.cancelled]}
        outcomes = [self._outcome(usable[run.job.id], run, why)
                    for run, why in failed if run.job.id in usable]
        _paths(outcomes)
        # no live row: handed back, and the next claim sets it aside
        self._hand_back(child, back + [run.job for run, _ in failed if run.job.id not in usable])
        if outcomes:
            settler = Settler(self.engine, self.settings, self.audit, child.worker_id)
            settler.answer_nacks = False  # the child's nack record answers only its own
            settler.settle(outcomes)
            for o in outcomes:
                logger.warning("job %s: %s%s", shown(o.job.id), shown(o.error, 2000),
                               " (%s)" % shown(o.error_type) if o.error_type else "")
        self.audit.flush()

    def _hand_back(self, child: Child, jobs: list[ClaimedJob]) -> None:
        now = datetime.now(UTC)
        started = [job for job in jobs if (job.queue, job.id) in child.running]
        for job in started:  # before Redis: a new claim's "running" must come after this
            self.audit.update(job.id, status=JobStatus.SCHEDULED, started_at=None,
                              worker_id="", updated_at=now)
        if started:
            self.audit.flush()
        for queue, claimed in grouped(jobs, lambda job: job.queue).items():
            self.engine.release(queue, claimed)
        if jobs:
            logger.info("handed back %d job(s) of worker process %d (%d had started)",
                        len(jobs), child.pid, len(started))


def why_failed(child: Child, key: Key, code: int) -> str:
    """Why the attempt of ``key``, which ran in ``child`` (gone with ``code``), failed:
    what it was doomed or killed for, else how the process ended."""
    if key in child.running and key in child.doomed:
        return child.doomed[key]
    return child.killed_for.get(key) or describe_exit(code)


def _paths(outcomes: list[Outcome]) -> None:
    """The callable of each outcome without a payload (a job cancelled while it ran: its
    row is read only for it), for the logs and signals of its settlement."""
    missing = [o for o in outcomes if not o.path]  # none: no query
    paths = dict(Job.objects.filter(pk__in=[o.job.id for o in missing])
                 .values_list("pk", "callable_path"))
    for o in missing:
        o.path = paths.get(o.job.id, "")
