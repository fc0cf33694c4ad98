"""The worker's ledger: every job it holds, from claim to settlement, under one lock.

A claimed job is *unstarted* until a thread takes it, then *running* (with the time it
started) until its outcome is *done*; the settlement (``settlement.py``) takes the done
outcomes and settles them, and keeps those it could not settle yet (their queue is
backing off: a node down) as *unsettled* for a later round. An attempt running past its
time limit (given at ``start``: ``Settings.timeout_for``, the job's, its queue's or
``JOB_TIMEOUT_SECONDS``) is *timed out*: its failure is done at once, its thread stays
busy (it still counts against capacity) and whatever it returns later is dropped, after
``on_late`` has seen it (the callable-limit slot it held is freed only then: its function
was still running).

A job is held by delivery: after a lost lease (Redis lost its data, or the lease
expired) the same job may come back under a newer token while this worker still holds the
older copy. That copy is *stale*: unstarted, it is dropped (``claimed`` of the newer copy
replaces it, ``lost`` drops it when the heartbeat finds its lease gone), so a thread that
takes it finds nothing to start; running, it keeps its thread's slot until it ends (its
settlement is refused: the redelivered copy owns the job).

Each job held unstarted has the time its row was last read (``read_at``: when the query
was sent, monotonic): at its claim, then whenever the worker reads the cancels of the
jobs it holds again (``reread``, ``held_cancels.py``); one found cancelled then ends
without starting.

Threads change the ledger only through its named transitions; each one takes the lock
once, so the hot path (a job starts, a job finishes) costs one acquisition per step. The
heartbeat thread reads ``held()`` and ``running_jobs()``.

The ledger of a child of ``delayq_worker --processes`` has its ``Link`` to the supervisor
(``tracking.py``; a worker without a supervisor has none): it reports each transition
over it, and keeps the dead man's switch armed while a job runs. Its time limits are
hard: the supervisor stops the process, so ``time_out_limits`` finds nothing.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Container, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django_delayq.engine.outcomes import lease_clock
from django_delayq.worker.outcome import Kind
from django_delayq.worker.tracking import Link, RunningJob, next_limit

if TYPE_CHECKING:
    from django_delayq.engine.outcomes import ClaimedJob
    from django_delayq.worker.outcome import Outcome

Key = tuple[str, str]  # (queue, job id)
Delivery = tuple[str, str, int]  # (queue, job id, lease token)
SETTLED_AS = {Kind.RETRY: "f", Kind.DEAD: "f", Kind.DEFER: "d"}  # else "s" (the ``x`` report)


def start_margin(lease_ms: int) -> float:
    """Seconds of lease a held job must have left to start without asking Redis
    (``Ledger.lease_left``): a tenth of the lease, at most half a second. A heartbeat every
    third of a lease leaves a live worker two thirds; one that was stopped (SIGSTOP, a VM
    pause) or cut off from Redis past its leases may find them taken back."""
    return min(0.5, lease_ms / 10_000)


def key_of(job: ClaimedJob) -> Key:
    return (job.queue, job.id)


def delivery(job: ClaimedJob) -> Delivery:
    return (job.queue, job.id, job.token)


class Ledger:
    def __init__(self, on_late: Callable[[Outcome], None] | None = None,
                 link: Link | None = None) -> None:
        self._on_late = on_late
        self.link = link  # a supervised child's: each transition is reported over it
        # A condition: the settling thread waits on it for outcomes (``wait_done``)
        self._lock = threading.Condition(threading.Lock())
        self._unstarted: dict[Key, ClaimedJob] = {}  # its newest delivery (older ones: stale)
        self._read_at: dict[Key, float] = {}  # an unstarted job's last row read (monotonic)
        # by delivery: a stale copy may still run while the redelivered one does
        self._running: dict[Delivery, RunningJob] = {}
        # their threads are still busy; by delivery (a retry of the job may run meanwhile)
        self._timed_out: dict[Delivery, RunningJob] = {}
        self._done: deque[Outcome] = deque()
        self._unsettled: list[Outcome] = []  # of queues backing off (a node down)
        # taken by ``take_done`` (maybe by several threads at once), being settled
        self._settling: dict[int, Outcome] = {}
        # when the leases the heartbeat extended end at the earliest (lease_clock; -inf: its
        # extend was refused), by delivery; replaced at each heartbeat (``extended``)
        self._until: dict[Delivery, float] = {}
        self.pace: float | None = None  # moving average of a job's run time (seconds)
        self.ended_at = 0.0  # when the last job that ran ended (monotonic): the pace's age
        self.notify_done = True  # finish() wakes wait_done (not when job threads settle)

    # -- transitions ---------------------------------------------------------------

    def claimed(self, jobs: Sequence[ClaimedJob], ended: Iterable[Outcome] = (),
                read_at: float | None = None) -> None:
        """Jobs claimed to run, whose rows were read at ``read_at`` (monotonic, when the
        query was sent; None: now), and outcomes of claimed jobs that end without running.
        A job held unstarted under an older token is replaced: that copy's lease is lost."""
        at = time.monotonic() if read_at is None else read_at
        with self._lock:
            self._unstarted.update((key_of(job), job) for job in jobs)
            self._read_at.update((key_of(job), at) for job in jobs)
            self._done.extend(ended)
            if self._done:
                self._lock.notify_all()
        if self.link is not None and jobs:
            for j in jobs:
                self.link.send("c", j.queue, j.id, j.token, j.due_ms, j.attempt,
                               j.home if j.home != j.queue else "")
            self.link.flush()  # now, not within FLUSH_S: a child killed meanwhile (its
            # flusher starved on a busy machine) would leave them to lease expiry, charged

    def start(self, job: ClaimedJob, limit_s: float | None = None) -> RunningJob | None:
        """A thread takes the job, whose attempt may run ``limit_s`` seconds (None: no
        limit); None when this copy is no longer held unstarted: released meanwhile
        (drain), or stale (its lease lost, maybe a newer delivery claimed)."""
        with self._lock:
            if not self._take_unstarted(job):
                return None
            run = RunningJob(job, time.monotonic(), datetime.now(UTC), limit_s)
            self._running[delivery(job)] = run
            self._changed()
        if self.link is not None:
            self.link.send("s", job.queue, job.id, job.token, repr(run.started_mono),
                           "" if run.limit is None else repr(run.limit), job.attempt,
                           run.started_at.isoformat())  # the attempt's start instant
            self.link.flush()  # sent before the call: a function that holds the GIL from
        return run  # its first line is still known to run (its limit, its silence)

    def finish(self, key: Key, outcome: Outcome) -> None:
        """Record a job's outcome. A timed-out attempt's late outcome is dropped (its
        failure was already recorded), after ``on_late`` has seen it."""
        with self._lock:
            run = self._running.pop(delivery(outcome.job), None)
            late = False
            if run is None:  # a timed-out delivery's (its retry may be running now)
                run = self._timed_out.pop(delivery(outcome.job), None)
                late = run is not None
            if run is not None:  # the recent pace of this worker's jobs (prefetch)
                self.ended_at = now = time.monotonic()
                took = now - run.started_mono
                self.pace = took if self.pace is None else 0.8 * self.pace + 0.2 * took
            if not late:
                first = not self._done
                self._done.append(outcome)
                if first and self.notify_done:
                    self._lock.notify_all()
            self._changed()
        if late and self._on_late is not None:
            self._on_late(outcome)
        if self.link is not None:
            self.link.send("e", *key, outcome.job.token)

    def time_out_limits(self, now: float, outcome_of: Callable[[ClaimedJob, datetime, float],
                                                                Outcome]) -> list[ClaimedJob]:
        """Fail the attempts past their time limit (``start``'s ``limit_s``) at ``now``
        (monotonic): their outcome (``outcome_of(job, started_at, limit_s)``) is done,
        they are no longer held (the heartbeat stops extending their lease) and their
        threads still count against capacity."""
        if self.link is not None:
            return []  # hard limits: the supervisor stops the process
        with self._lock:
            over = [(d, run) for d, run in self._running.items() if run.over(now)]
            for d, run in over:
                self._timed_out[d] = self._running.pop(d)
                self._done.append(outcome_of(run.job, run.started_at, run.limit or 0.0))
            if over:
                self._lock.notify_all()
                self._changed()
        return [run.job for _, run in over]

    def _take_unstarted(self, job: ClaimedJob) -> bool:
        """Take ``job`` off the unstarted ones if that copy is the one held (called holding
        the lock): False when it was released, or replaced by a newer delivery."""
        held = self._unstarted.get(key_of(job))
        if held is None or held.token != job.token:
            return False
        del self._unstarted[key_of(job)]
        del self._read_at[key_of(job)]
        return True

    def _changed(self) -> None:
        """The running jobs changed (called holding the lock): a supervised child's dead
        man's switch is armed while a job runs, never disarmed while one does."""
        if self.link is not None:
            self.link.dead_man.arm(bool(self._running))

    def next_limit(self) -> float | None:
        """The earliest moment (monotonic) a running attempt reaches its time limit (None
        under a supervisor: it enforces them)."""
        if self.link is not None:
            return None
        with self._lock:
            return next_limit(self._running.values())

    def lost(self, jobs: Iterable[ClaimedJob]) -> list[ClaimedJob]:
        """The leases of ``jobs`` are gone (the heartbeat's extend was refused): those
        still held unstarted under that token are dropped, never to start (the copy
        redelivered from Redis runs instead; no outcome: the job is not this worker's).
        Returns them. Running copies run on (the function cannot be stopped); their
        outcome's settlement is refused."""
        with self._lock:
            dropped = [j for j in jobs if self._take_unstarted(j)]
        if self.link is not None and dropped:
            for j in dropped:
                self.link.send("r", j.queue, j.id, j.token)
        return dropped

    def release_unstarted(self, keep: int = 0) -> list[ClaimedJob]:
        """Drop the jobs no thread has taken yet (to hand them back to Redis) but the
        ``keep`` first in the threads' order (priority, then claim order)."""
        with self._lock:
            held = sorted(self._unstarted.values(),  # a stable sort: claim order kept
                          key=lambda j: -(j.payload.priority if j.payload else 0))
            jobs = held[max(0, keep):]
            for job in jobs:
                del self._unstarted[key_of(job)]
                del self._read_at[key_of(job)]
        if self.link is not None:
            for j in jobs:
                self.link.send("r", j.queue, j.id, j.token)
        return jobs

    def take_done(self) -> list[Outcome]:
        """The outcomes to settle now: those kept unsettled, then those done since. They
        stay held (their leases extended) until ``keep_unsettled`` says how it went."""
        with self._lock:
            outcomes, self._unsettled = self._unsettled, []
            outcomes.extend(self._done)
            self._done.clear()
            self._settling.update((id(o), o) for o in outcomes)
        return outcomes

    def wait_done(self, timeout: float) -> bool:
        """Wait until an outcome is done (or ``timeout`` seconds); True when one is."""
        with self._lock:
            if not self._done:
                self._lock.wait(timeout)
            return bool(self._done)

    def wake_settling(self) -> None:
        """Cut a ``wait_done`` short (the worker stops)."""
        with self._lock:
            self._lock.notify_all()

    def keep_unsettled(self, outcomes: list[Outcome], taken: list[Outcome]) -> None:
        """The end of a settling round that took ``taken``: ``outcomes`` were not settled
        (their queue is backing off): settle them later; the others taken are settled, no
        longer held (to a supervisor: reported ``x``, with how: their rows are written
        next)."""
        with self._lock:
            self._unsettled = outcomes + self._unsettled
            for o in taken:
                self._settling.pop(id(o), None)
        if self.link is not None:
            kept = {id(o) for o in outcomes}
            for o in taken:
                if id(o) not in kept:
                    self.link.send("x", o.job.queue, o.job.id, o.job.attempt,
                                   SETTLED_AS.get(o.kind, "s"), o.job.token)

    def reread(self, jobs: Iterable[ClaimedJob], at: float, asked: Collection[str],
               ended: Callable[[ClaimedJob], Outcome]) -> list[ClaimedJob]:
        """The rows of ``jobs`` were read again by a query sent at ``at`` (monotonic):
        ``asked`` holds the ids whose cancel was asked. Of those still held unstarted (the
        same delivery), these end now with ``ended(job)``'s outcome, never to start (a
        thread that takes one finds nothing to start); the others count as read at
        ``at``. Returns the jobs ended."""
        out: list[ClaimedJob] = []
        with self._lock:
            for job in jobs:
                key = key_of(job)
                if job.id in asked and self._take_unstarted(job):  # the same delivery held
                    self._done.append(ended(job))
                    out.append(job)
                elif (held := self._unstarted.get(key)) is not None and held.token == job.token:
                    self._read_at[key] = max(self._read_at[key], at)
            if out:
                self._lock.notify_all()
        return out

    def extended(self, until: dict[Delivery, float], kept: Container[Delivery] = ()) -> None:
        """The heartbeat extended the leases of the deliveries in ``until`` (each: when
        its lease ends at the earliest, ``lease_clock()``; -inf: refused, the lease is
        lost). What was known of the others is forgotten (they are no longer held), but
        for the deliveries in ``kept`` (their extend failed: nothing new is known)."""
        with self._lock:  # built whole, then assigned: ``lease_left`` reads it unlocked
            known = {d: t for d, t in self._until.items() if d in kept} if kept else {}
            known.update(until)
            self._until = known

    # -- reads ---------------------------------------------------------------------

    def read_at(self, job: ClaimedJob) -> float | None:
        """When the row of ``job``, held unstarted, was last read (monotonic); None when it
        is not held unstarted. Read without the lock (one dict look-up, a job thread's
        per job): ``reread`` and ``start`` take it and decide."""
        return self._read_at.get(key_of(job))

    def oldest_read(self) -> float | None:
        """The oldest ``read_at`` of the jobs held unstarted; None: none is."""
        with self._lock:
            return min(self._read_at.values(), default=None)

    def unstarted(self) -> list[ClaimedJob]:
        """The jobs held unstarted (no thread has taken them yet)."""
        with self._lock:
            return list(self._unstarted.values())

    def lease_left(self, job: ClaimedJob) -> float:
        """Seconds left of ``job``'s lease as this worker last extended it (its claim, or
        the last heartbeat whose extend Redis accepted), on ``lease_clock`` (CLOCK_BOOTTIME
        or the monotonic clock), which counts on while the process is stopped: not above 0
        once it may have passed (the process was stalled past it, or could not extend it);
        -inf when its extend was refused; inf when not known. No lock: one dict read (the
        dict is replaced whole)."""
        return self._until.get(delivery(job), job.lease_until) - lease_clock()

    def held(self, *, sent: bool = True) -> list[ClaimedJob]:
        """The jobs whose leases this worker keeps: running, waiting for a thread, or
        finished and waiting to be settled (a stalled database or Redis must not let the
        lease of a finished job lapse: another worker would run it again). ``sent``
        False: but for the jobs a settling round has sent (their ack may have ended their
        lease already: its reply says how it went)."""
        with self._lock:
            jobs = ([r.job for r in self._running.values()] + list(self._unstarted.values())
                    + [o.job for o in self._done] + [o.job for o in self._unsettled])
            if sent:
                jobs += [o.job for o in self._settling.values()]
            return jobs

    def idle(self) -> bool:
        with self._lock:
            return not (self._running or self._done or self._unstarted or self._unsettled
                        or self._settling)

    def capacity_used(self) -> int:
        """Jobs taking a thread or waiting for one (timed-out attempts still do)."""
        with self._lock:
            return len(self._running) + len(self._unstarted) + len(self._timed_out)

    def done_count(self) -> int:
        """Outcomes finished and not taken yet (read without the lock: a hint)."""
        return len(self._done)

    def running_jobs(self) -> list[RunningJob]:
        """The jobs running now, longest-running first."""
        with self._lock:
            runs = list(self._running.values())
        return sorted(runs, key=lambda r: r.started_mono)

    def waiting(self) -> int:
        """Claimed jobs no thread has taken yet."""
        with self._lock:
            return len(self._unstarted)

    def unsettled_queues(self) -> set[str]:
        with self._lock:
            return {outcome.job.queue for outcome in self._unsettled}

    def unsettled(self, outcomes: Iterable[Outcome]) -> list[Outcome]:
        """Those of ``outcomes`` Redis has not settled yet: kept unsettled, or taken by a
        round that has not ended (the early rows write no other: ``early_rows.py``)."""
        with self._lock:
            held = {id(o) for o in self._unsettled} | self._settling.keys()
        return [o for o in outcomes if id(o) in held]
