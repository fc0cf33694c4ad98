"""What a worker runs, told to its registry entry and, under a supervisor, to the supervisor.

``TrackedLedger`` is the worker's ``Ledger`` plus a record of each running job (queue,
callable, start time, time limit): the heartbeat publishes it (``"jobs"`` in the registry
info). A worker started by ``delayq_worker --processes`` (a *child*) also reports every
transition of its jobs over its ``Link``, a socket to the supervisor, one line each:

    h <pid> <worker id>                        once, at start
    c <queue> <id> <token> <due_ms>            a job claimed (one line per job)
    s <queue> <id> <token> <at> <limit>        started at ``at`` (monotonic s); limit in s,
                                               empty for none
    e <queue> <id>                             ended (its outcome is settled next)
    r <queue> <id>                             handed back unstarted (drain)

fields separated by tabs (queue names are printable, ids are ours: neither holds a tab or
a newline; a line that does not parse is ignored). Text, not JSON: the supervisor reads
two lines per job.

Reports leave in batches, at most ``FLUSH_S`` after the transition (one wake-up of the
supervisor per batch, not per job). So the supervisor knows, within milliseconds, the
jobs a child holds and which of them run since when: it can kill a child whose job
overruns its time limit and hand the others back at once (``supervisor.py``).
``time.monotonic`` is one clock for every process of a host. A report lost with a
process that died (its last ``FLUSH_S``) leaves that job to its lease, as for any dead
worker.

The supervisor writes one word a line back: ``drain`` (stop claiming, finish, exit) or
``stop`` (the hard stop). End of file means the supervisor is gone: the child drains,
and, with nobody left to enforce its time limits, exits at once (leases left to expire)
when a running job overruns its limit. Under a supervisor the limits are hard: the child
fails no attempt on its own (``Ledger.time_out`` finds nothing).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django_delayq.core.conf import Settings
from django_delayq.engine import ClaimedJob
from django_delayq.worker.ledger import Key, Ledger, key_of
from django_delayq.worker.runner import Outcome

logger = logging.getLogger(__name__)

FLUSH_S = 0.01
EXIT_ORPHAN_OVERRUN = 3  # loop.EXIT_HARD_STOP (not imported: loop imports this module)


def time_limit(settings: Settings, job: ClaimedJob) -> float | None:
    """The attempt's time limit in seconds: the job's own, else its queue's, else
    ``JOB_TIMEOUT_SECONDS`` (``Settings.timeout_for``)."""
    return settings.timeout_for(job.queue, job.payload.timeout if job.payload else None)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningJob:
    job: ClaimedJob
    callable: str
    started_ms: int  # wall clock, epoch ms
    started_mono: float
    limit: float | None

    def info(self) -> dict[str, Any]:
        return {"id": self.job.id, "queue": self.job.queue, "callable": self.callable,
                "started_ms": self.started_ms}


class Link:
    """The child's end of its socket to the supervisor."""

    def __init__(self, fd: int) -> None:
        os.set_inheritable(fd, False)  # a process a job starts must not keep it open
        self.sock = socket.socket(fileno=fd)
        self._lock = threading.Lock()
        self._pending: list[bytes] = []
        self._ready = threading.Event()
        self.orphaned = threading.Event()
        threading.Thread(target=self._flush_loop, name="delayq-link-out", daemon=True).start()

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
        """Send the queued reports now (also on the way out: the last ones count)."""
        with self._lock:
            data, self._pending = b"".join(self._pending), []
            try:
                self.sock.sendall(data)
            except OSError:  # the supervisor is gone: the listener drains this worker
                self.orphaned.set()

    def listen(self, on_drain: Callable[[], None], on_stop: Callable[[], None],
               running: Callable[[], list[RunningJob]]) -> threading.Thread:
        thread = threading.Thread(target=self._listen, args=(on_drain, on_stop, running),
                                  name="delayq-link", daemon=True)
        thread.start()
        return thread

    def _listen(self, on_drain: Callable[[], None], on_stop: Callable[[], None],
                running: Callable[[], list[RunningJob]]) -> None:
        for word in self._words():
            if word == "drain":
                on_drain()
            elif word == "stop":
                on_stop()
        self.orphaned.set()
        logger.warning("the supervisor is gone: draining")
        on_drain()
        while True:  # nobody else enforces the time limits now
            now = time.monotonic()
            over = [r for r in running() if r.limit is not None and now - r.started_mono > r.limit]
            if over:
                logger.error("job %s: past its %gs time limit with no supervisor to stop "
                             "it; exiting (its lease will expire)", over[0].job.id, over[0].limit)
                os._exit(EXIT_ORPHAN_OVERRUN)
            time.sleep(0.2)

    def _words(self) -> Iterable[str]:
        buffer = b""
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                return
            if not data:
                return
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            yield from (line.decode(errors="replace").strip() for line in lines)


@dataclass(frozen=True, slots=True, kw_only=True)
class Supervision:
    """How a child worker was started: its supervisor's id, how many children it runs,
    its link. On the command line: ``--supervised FD:PROCESSES:SUPERVISOR_ID``."""

    supervisor_id: str
    processes: int
    link: Link

    @staticmethod
    def encode(fd: int, processes: int, supervisor_id: str) -> str:
        return "%d:%d:%s" % (fd, processes, supervisor_id)

    @classmethod
    def decode(cls, spec: str) -> Supervision:
        fd, processes, supervisor_id = spec.split(":", 2)
        return cls(supervisor_id=supervisor_id, processes=int(processes), link=Link(int(fd)))


class TrackedLedger(Ledger):
    """The ledger, recording running jobs and reporting each transition to the link."""

    def __init__(self, settings: Settings, supervision: Supervision | None = None,
                 on_late: Callable[[Outcome], None] | None = None) -> None:
        super().__init__(on_late)
        self.settings = settings
        self.link = supervision.link if supervision is not None else None
        self._mirror_lock = threading.Lock()
        self._claimed: dict[Key, ClaimedJob] = {}
        self._runs: dict[Key, RunningJob] = {}


    def claimed(self, jobs: Iterable[ClaimedJob], ended: Iterable[Outcome] = ()) -> None:
        jobs = list(jobs)
        with self._mirror_lock:
            self._claimed.update((key_of(job), job) for job in jobs)
        super().claimed(jobs, ended)
        if self.link is not None:
            for j in jobs:
                self.link.send("c", j.queue, j.id, j.token, j.due_ms)

    def start(self, key: Key, limit_s: float | None = None) -> bool:
        if not super().start(key, limit_s):
            return False
        with self._mirror_lock:
            job = self._claimed.pop(key, None)
            if job is None:
                return True
            run = RunningJob(job=job, callable=getattr(job.payload, "path", ""),
                             started_ms=int(time.time() * 1000), started_mono=time.monotonic(),
                             limit=limit_s if limit_s is not None
                             else time_limit(self.settings, job))
            self._runs[key] = run
        if self.link is not None:
            self.link.send("s", job.queue, job.id, job.token, repr(run.started_mono),
                           "" if run.limit is None else repr(run.limit))
            if run.limit is not None:  # sent before the call: a function that holds the
                self.link.flush()  # GIL from its first line must still meet its limit
        return True

    def finish(self, key: Key, outcome: Outcome) -> bool:
        first = super().finish(key, outcome)
        self._ended([key])
        return first

    def time_out(self, *args: Any, **kwargs: Any) -> list[ClaimedJob]:
        if self.link is not None:
            return []  # hard limits: the supervisor stops the process
        overdue: list[ClaimedJob] = super().time_out(*args, **kwargs)
        self._ended([key_of(job) for job in overdue])
        return overdue

    def time_out_limits(self, *args: Any, **kwargs: Any) -> list[ClaimedJob]:
        if self.link is not None:
            return []  # hard limits: the supervisor stops the process
        overdue: list[ClaimedJob] = super().time_out_limits(*args, **kwargs)
        self._ended([key_of(job) for job in overdue])
        return overdue

    def next_limit(self) -> float | None:
        return None if self.link is not None else super().next_limit()

    def release_unstarted(self) -> list[ClaimedJob]:
        jobs = super().release_unstarted()
        with self._mirror_lock:
            for job in jobs:
                self._claimed.pop(key_of(job), None)
        if self.link is not None:
            for j in jobs:
                self.link.send("r", j.queue, j.id)
        return jobs

    def _ended(self, keys: list[Key]) -> None:
        with self._mirror_lock:
            ended = [key for key in keys if self._runs.pop(key, None) is not None]
        if self.link is not None:
            for queue, job_id in ended:
                self.link.send("e", queue, job_id)

    def running_jobs(self) -> list[RunningJob]:
        """The jobs running now, longest-running first."""
        with self._mirror_lock:
            runs = list(self._runs.values())
        return sorted(runs, key=lambda r: r.started_mono)

