"""Claiming: due jobs from Redis to the job threads, at most what the threads start soon.

The main loop calls ``claim_due`` each round: it claims only from the queues whose next
due time has come (known from the last claim's reply or a wake message; every queue at
each ``WAKE_INTERVAL_SECONDS``), at most the room the threads fill soon (``capacity``:
free threads plus the prefetch by pace). The urgent timer (``UrgentTimer``) claims a few
jobs of priority above 0 at their due time, on its own thread (``claim_urgent``). Every
claim asks the queue's gate first (limits and pause: ``gates.QueueGate``) and hands its
jobs over to the threads (``handover.py``). The wake listener (``Engine.wake_listener``:
the subscription, its reconnects) hears of jobs due earlier than known. A queue whose
Redis fails backs off alone (``queue_backoff.py``).

Due times are on the Redis server's clock; each claim aligns a local monotonic clock to
it (``ServerClock``: offset = server now - the midpoint of the claim's round trip), so
the loop waits on a local timer, never on Redis's own (late by up to 100 ms at ``hz 10``).

A drain hands the claimed jobs no thread has started back to Redis (``hand_back``). So
does each round once the pace is stale (``trim``): no job ended for ``PREFETCH_SECONDS``
while jobs wait, so the threads are busy with jobs slower than the pace that claimed them
(a batch of slow jobs right after a run of no-op ones); the jobs held beyond the room go
back for another worker's idle threads, and the urgent timer claims none over the room.

**The urgent timer**: a thread that claims a queue's job of priority above 0 at its due time.

The main loop claims between settling and housekeeping; during a backlog one round (settle a
batch, claim ``CLAIM_BATCH`` jobs, read their payloads) lasts tens of milliseconds, and a
job coming due in the middle of it waited for the next round. Each claim reply tells the
due time of the queue's earliest job of priority above 0 still in pending
(``ClaimResult.next_urgent_ms``, claim.lua's urgent index), and a wake message tells it
when one placed comes first (lua/lib.lua ``line``); this thread sleeps until then
on the local clock and makes a small claim of its own (``claim``: the worker's), whatever
the main loop is doing. claim.lua promotes that job ahead of the backlog and leases the
lowest ready scores, so the job is among those claimed; the worker's local queue puts it
ahead of the claimed jobs of lower priority, and the next free thread starts it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import close_old_connections
from redis.exceptions import RedisError

from django_delayq.engine.logtext import shown
from django_delayq.engine.replies import grouped
from django_delayq.engine.scripts import MAX_TURNS
from django_delayq.worker import gates
from django_delayq.worker.handover import Handover
from django_delayq.worker.queue_backoff import QueueBackoff

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.engine.outcomes import ClaimResult
    from django_delayq.worker.ledger import Ledger
    from django_delayq.worker.outcome import Outcome

logger = logging.getLogger(__name__)

URGENT_BATCH = 4  # jobs a claim of the urgent timer takes (UrgentTimer)
MAX_SLEEP_S = 1.0  # the urgent timer's: a due time noted meanwhile wakes it at once; this
# only bounds a wait
PREFETCH_SECONDS = 0.1  # claimed jobs beyond free threads: what they start in this time
CLAIMS_PER_ROUND = 8  # claims of one queue in one round of the main loop, at most


def monotonic_ms() -> float:
    return time.monotonic() * 1000


class ServerClock:
    """The Redis server's clock as the worker keeps it: the local monotonic clock plus the
    offset the last claim measured."""

    def __init__(self) -> None:
        self.offset_ms = 0.0  # server clock - local monotonic clock

    def now_ms(self) -> float:
        return monotonic_ms() + self.offset_ms


class Claiming:
    """Who claims: the main loop's claims, the urgent timer, the wake listener, the queues'
    gates and backoff, the handover to the threads. ``start``/``stop``: the listener's and
    the timer's threads."""

    def __init__(self, engine: Engine, settings: Settings, ledger: Ledger,
                 wake: threading.Event, *, queues: tuple[str, ...], concurrency: int,
                 prefetch: int | None, max_jobs: int | None, burst: bool) -> None:
        self.engine, self.settings, self.ledger = engine, settings, ledger
        # Redis's clock, as each claim measures it: the start gate reads it too (``clock``)
        self.clock = clock = ServerClock()
        self.queues, self.concurrency, self.prefetch = queues, concurrency, prefetch
        self.max_jobs, self.burst = max_jobs, burst
        self.wake = wake  # the main loop's: a wake message, a settled job with room now
        self.queue_gate = gates.QueueGate(engine, settings)  # queue limits and pauses
        # Claimed jobs wait for a thread by priority, then due time (not behind a backlog)
        self.handover = Handover(engine, settings, ledger)
        self.urgent = UrgentTimer(self.claim_urgent, clock.now_ms)
        self.listener = engine.wake_listener(queues, wake)
        self.backoff = QueueBackoff()
        self.next_due: dict[str, int | None] = dict.fromkeys(queues)
        self.draining = False
        self.settled_rounds = 0  # settling rounds so far (a --burst end waits for none)
        self._last_poll = -1e18

    def start(self) -> None:
        self.listener.start()
        self.urgent.start()

    def stop(self) -> None:
        self.urgent.stop()
        self.listener.stop()

    def drain(self) -> None:
        """No claim from now on (a flag: a signal handler calls it); wakes the main loop."""
        self.draining = True
        self.wake.set()

    # -- room ----------------------------------------------------------------------

    def capacity(self) -> int:
        room = self.concurrency + self._prefetch() - self.ledger.capacity_used()
        if self.max_jobs is not None:
            room = min(room, self.max_jobs - self.handover.claimed_total)
        return room

    def _prefetch(self) -> int:
        """Claimed jobs held beyond the free threads: what the threads start within
        ``PREFETCH_SECONDS`` at the recent pace of this worker's jobs, at most
        ``CLAIM_BATCH``; ``WorkerOptions.prefetch`` fixes it. Slow jobs are not prefetched:
        a due job does not wait here while another worker has an idle thread for it. Nor
        on a stale pace (``_quiet``): no job ended for longer than that, so the jobs now
        take at least as long (or the worker was idle: its pace is of jobs long gone)."""
        if self.prefetch is not None:
            return self.prefetch
        if (pace := self.ledger.pace) is None:
            return 0
        pace = max(pace, self._quiet())
        pace_room = int(self.concurrency * PREFETCH_SECONDS / max(pace, 1e-4))
        return min(self.settings.claim_batch, pace_room)

    def _quiet(self) -> float:
        """Seconds since a job of this worker last ended, once over ``PREFETCH_SECONDS``
        (the pace is stale); else 0."""
        quiet = time.monotonic() - self.ledger.ended_at
        return quiet if quiet > PREFETCH_SECONDS else 0.0

    def _by_pace(self) -> bool:
        """The prefetch follows the pace: not fixed, nor a --max-jobs or --burst run (their
        main loop claims all it may run)."""
        return self.prefetch is None and self.max_jobs is None and not self.burst

    def trim(self) -> None:
        """Hand back to Redis the jobs held beyond the room once the pace proved stale (no
        job ended for ``PREFETCH_SECONDS``: the threads are busy with jobs slower than the
        pace that claimed them): the last in the threads' order, for another worker's idle
        threads. The main loop's, each round."""
        if not self._by_pace() or self.draining or not self._quiet():
            return
        with self.handover.lock:
            if (over := -self.capacity()) > 0 and (waiting := self.ledger.waiting()):
                self.release_unstarted(keep=waiting - over, trimmed=True)

    # -- claims --------------------------------------------------------------------

    def claim_due(self) -> None:
        self.trim()
        for queue, due in self.listener.take().items():
            self._due_by(queue, due)
            self.urgent.earlier(queue, due)  # full, the main loop claims nothing: the timer
        poll_all = monotonic_ms() - self._last_poll >= self.settings.wake_interval_seconds * 1000
        if poll_all:
            self._last_poll = monotonic_ms()
        now = self.clock.now_ms()
        ready = [q for q in self.queues
                 if poll_all or ((d := self.next_due[q]) is not None and d <= now)]
        self.backoff.each(ready, self.claim)

    def claim(self, queue: str) -> None:
        for _ in range(CLAIMS_PER_ROUND):  # then the round goes on (other queues, limits)
            room = self.capacity()
            if room <= 0 or not self.queue_gate.open(queue, self.clock.now_ms()):
                return
            before = monotonic_ms()
            asked = min(room, self.settings.claim_batch)
            with self.handover.lock:
                result = self.engine.claim(queue, asked, self.settings.lease_ms)
                self.clock.offset_ms = result.now_ms - (before + monotonic_ms()) / 2
                self.next_due[queue] = self.queue_gate.note(queue, result)  # paused: None
                self._hand_over(queue, result)
            more = result.next_due_ms is not None and result.next_due_ms <= result.now_ms
            if not more or len(result.jobs) < min(asked, MAX_TURNS):  # all there was (a
                return  # grouped queue's claim takes at most MAX_TURNS): settle first

    def claim_urgent(self, queue: str) -> None:
        """The urgent timer's claim, on its thread: a few jobs over the room; not in --max-jobs
        or --burst (their main loop claims all it may run), nor once draining, nor with no
        room on a stale pace (``trim`` would hand them back)."""
        with self.handover.lock:
            room = self.capacity()  # a stale pace: the threads are busy with slow jobs, a
            # job claimed now would wait for one; left for another worker's idle thread
            if self.draining or self.max_jobs is not None or self.burst or \
                    room <= -4 * URGENT_BATCH or \
                    (room <= 0 and self.prefetch is None and self._quiet()) or \
                    not self.queue_gate.open(queue, self.clock.now_ms()):
                return
            self._hand_over(queue, self.engine.claim(queue, URGENT_BATCH, self.settings.lease_ms))

    def _hand_over(self, queue: str, result: ClaimResult) -> None:
        """Note the queue's next urgent job for the timer, and hand the claimed jobs to the
        threads (``handover.py``). When their rows cannot be read they are back in Redis,
        due again at once: the next round claims them (and fails or works) instead of
        sleeping until a poll, so a working round means the rows are back."""
        self.urgent.note(queue, result.next_urgent_ms)
        try:
            self.handover.take(queue, result.jobs)
        except Exception:
            close_old_connections()
            self._due_by(queue, min(job.due_ms for job in result.jobs))
            raise

    def _due_by(self, queue: str, due: int) -> None:
        """``queue`` is due at ``due`` (server ms) at the latest."""
        known = self.next_due.get(queue)
        self.next_due[queue] = due if known is None else min(known, due)

    def settled(self, outcomes: list[Outcome]) -> None:
        """``outcomes`` were settled (the settling thread's hook): a queue limit may have
        room now; the main loop tops up the jobs waiting for a thread once fewer than the
        threads are left."""
        self.settled_rounds += 1
        self.queue_gate.settled(outcomes, self.next_due)
        if self.queue_gate.limited or self.ledger.waiting() < self.concurrency:
            self.wake.set()

    # -- the main loop's questions -------------------------------------------------

    def burst_finished(self) -> bool:
        if not self.ledger.idle():
            return False
        settled = self.settled_rounds  # a job claimed below may end (and retry) meanwhile
        now = self.engine.time_ms()
        for q in self.queues:
            self.claim(q)
        with self.handover.lock:
            return (self.ledger.idle() and not self.queue_gate.holding(now)  # a limit holds some
                    and settled == self.settled_rounds
                    and all(d is None or d > now for d in self.next_due.values()))

    def wait_ms(self, wait_ms: float) -> float:
        """``wait_ms``, or less: until the next due time of a queue with room to claim;
        while jobs wait for a thread, ``PREFETCH_SECONDS`` (``trim``)."""
        if self._by_pace() and not self.draining and self.ledger.waiting():
            wait_ms = min(wait_ms, PREFETCH_SECONDS * 1000)
        if not self.draining and self.capacity() > 0:
            now = self.clock.now_ms()
            for queue, due in self.next_due.items():
                if due is not None:  # a queue backing off is due when its delay ends
                    wait_ms = min(wait_ms, max(self.queue_gate.due(queue, due) - now,
                                               self.backoff.remaining_ms(queue)))
        return wait_ms

    def hand_back(self) -> bool:
        """A drain's round: the unstarted jobs go back to Redis; True once nothing is held.
        Under the handover lock: an urgent claim in flight has handed its jobs over."""
        with self.handover.lock:
            self.release_unstarted()
            return self.ledger.idle()

    def release_unstarted(self, keep: int = 0, *, trimmed: bool = False) -> None:
        """Give back (uncharged) the jobs the ledger holds that no thread has started (but
        the ``keep`` next to start; ``trimmed``: by ``trim``, their claims given back to the
        rate windows too); one that cannot be given back keeps its lease until it
        expires, then recovery runs it."""
        jobs = self.ledger.release_unstarted(keep)
        for queue, claimed in grouped(jobs, lambda job: job.queue).items():
            try:
                self.engine.release(queue, claimed, unclaim=trimmed)
            except RedisError as exc:  # their leases will expire; recovery runs them
                logger.warning("could not release %d job(s): %s", len(claimed), shown(exc))
        if jobs:
            logger.log(logging.DEBUG if trimmed else logging.INFO,
                       "released %d claimed job(s) that had not started", len(jobs))


class UrgentTimer:
    def __init__(self, claim: Callable[[str], None], now_ms: Callable[[], float]) -> None:
        self._claim = claim  # claims a few jobs of the queue; notes the next due time
        self._now_ms = now_ms  # the server clock as the worker keeps it
        self._due: dict[str, int] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="delayq-urgent", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def note(self, queue: str, due_ms: int | None) -> None:
        """The queue's next urgent due time from a claim reply (None: there is none)."""
        with self._cond:
            if due_ms is None:
                self._due.pop(queue, None)
            elif self._due.get(queue) != due_ms:
                self._due[queue] = due_ms
                self._cond.notify()

    def earlier(self, queue: str, due_ms: int) -> None:
        """A wake message's due time (the channel tells an urgent job that comes first)."""
        with self._cond:
            if due_ms < self._due.get(queue, due_ms + 1):
                self._due[queue] = due_ms
                self._cond.notify()

    def _next(self) -> str | None:
        """Wait for the earliest due time; the queue to claim from, None when stopped."""
        with self._cond:
            while not self._stopped:
                if not self._due:
                    self._cond.wait(MAX_SLEEP_S)
                    continue
                queue, at = min(self._due.items(), key=lambda item: item[1])
                wait_s = (at - self._now_ms()) / 1000
                if wait_s <= 0:
                    del self._due[queue]  # the claim's reply notes the next one
                    return queue
                self._cond.wait(min(wait_s, MAX_SLEEP_S))
        return None

    def _run(self) -> None:
        while (queue := self._next()) is not None:
            try:
                self._claim(queue)
            except Exception as exc:  # noqa: BLE001 - the main loop claims it at its next round
                logger.debug("urgent claim of %s failed: %s", shown(queue), shown(exc))
                with self._cond:
                    self._cond.wait(0.1)
