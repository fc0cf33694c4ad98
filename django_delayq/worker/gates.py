"""What may start, and when: queue limits and pauses at claim time, expiry and callable
limits at start time.

**Queues** (``QueueGate``). Queue limits (``DELAYQ["QUEUE_OPTIONS"]``: ``rate_limit``,
``concurrency``) live in Redis and are enforced by the claim script; each worker writes
its settings' limits for its queues when it starts (``QueueGate.write_limit``: the last
worker started wins, and a queue without options has its limit cleared), before its
first claim of the queue, whichever thread makes it: ``open``, which every claim asks
first (the main loop's and the urgent timer's, whose first claim may come before the main
loop's when jobs wait at start-up), writes it when it was not written yet. A claim a
limit stopped names the server time to try again (``blocked_until_ms``): the loop claims
that queue again then, not before, and serves its other queues meanwhile. A paused queue
claims nothing: the loop forgets its due time and claims it again when a wake-up
arrives (``resume`` publishes one) or at the next poll, so it never spins on it.

**Starts** (``StartGate``), in the job's thread, after its row was read at claim time:

* a job whose row's ``expires_at`` has passed (on the Redis server's clock, as the loop
  estimates it) is not started (again): it ends ``expired`` (acked);
* a job whose callable has ``DELAYQ["CALLABLE_LIMITS"]`` asks Redis for a start
  (``Engine.acquire``) right before its function is called. Refused, it is *deferred*:
  back to ``pending`` due at the time the engine named (for a full concurrency: after a
  back-off up to a second), the attempt and its claim's rate-window entries given back
  (``ClaimedJob.claimed_ms``: the claim cost its queue no rate), its row
  untouched (still ``scheduled`` or ``retrying`` with its due time, so its lateness
  still counts from the time it was due). Granted, it holds a slot of the callable's
  concurrency until its attempt is settled (``release``). The slot has a lease of
  ``LEASE_SECONDS``, renewed with the worker's heartbeat (``renew``) while the function
  runs (even past a soft time limit: it still runs), so the slot of a dead worker frees
  itself when its lease passes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from django_delayq.core import limits
from django_delayq.engine.logtext import shown
from django_delayq.worker.outcome import Kind, Outcome, deferred, expired

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.engine.outcomes import ClaimedJob, ClaimResult

logger = logging.getLogger(__name__)

RETRY_AFTER_ERROR_MS = 1000  # a start Redis could not decide on is tried again this late


class QueueGate:
    """The loop's view of its queues' limits and pauses (the main thread's; the urgent
    timer's thread asks ``open`` too, under the handover lock)."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine, self.settings = engine, settings
        self.written: set[str] = set()  # queues whose limit this worker stored in Redis
        self.blocked: dict[str, int] = {}  # queue -> server ms it may be claimed again
        self.limited: set[str] = set()  # a queue limit held due jobs back at the last claim
        self.deferred_until = 0  # server ms: the latest due time of a job this worker deferred
        self.paused: set[str] = set()  # paused at the last claim

    def write_limit(self, queue: str) -> None:
        """Store the queue's limit from the settings in Redis (none: clear it), once.
        Two threads may both write it (the same values): marked written only after the
        write, so no claim goes ahead of it."""
        if queue not in self.written:
            rate, concurrency = self.settings.queue_limit(queue)
            self.engine.set_queue_limit(queue, rate=rate, concurrency=concurrency,
                                        groups=limits.group_defaults(*self.settings.group_limit(queue)))
            self.written.add(queue)

    def note(self, queue: str, result: ClaimResult) -> int | None:
        """Record what a claim said; returns the queue's next due time to wait for."""
        if result.limited:
            self.limited.add(queue)
        else:
            self.limited.discard(queue)
        if result.paused:
            self.paused.add(queue)
            self.blocked.pop(queue, None)
            return None  # wait for a wake-up (resume publishes one) or the next poll
        self.paused.discard(queue)
        if result.blocked_until_ms is None:
            self.blocked.pop(queue, None)
            return result.next_due_ms
        self.blocked[queue] = result.blocked_until_ms
        return result.blocked_until_ms if result.next_due_ms is None else result.next_due_ms

    def settled(self, outcomes: Iterable[Outcome], next_due: dict[str, int | None]) -> None:
        """``outcomes`` were settled: a queue whose limit held jobs back may let one in
        now (its concurrency has room), so it is due for a claim; deferred jobs are noted
        (``holding``)."""
        for o in outcomes:
            if o.job.queue in self.limited:
                next_due[o.job.queue] = 0
            if o.kind is Kind.DEFER and o.retry_at_ms is not None:
                self.deferred_until = max(self.deferred_until, o.retry_at_ms)

    def holding(self, server_now_ms: float) -> bool:
        """Whether a limit holds back jobs that are due (a burst waits for them): a queue
        limit at the last claim of a queue, or a callable limit that deferred a job."""
        return bool(self.blocked or self.limited) or self.deferred_until > server_now_ms

    def open(self, queue: str, server_now_ms: float) -> bool:
        """Whether ``queue`` may be claimed now (its limit's block has passed). Asked
        before every claim: writes the queue's limit first if this worker has not yet
        (``write_limit``; a Redis error propagates: no claim then)."""
        self.write_limit(queue)
        until = self.blocked.get(queue)
        return until is None or until <= server_now_ms

    def due(self, queue: str, due_ms: float) -> float:
        """When to claim ``queue`` for a job due at ``due_ms``: not before its block ends."""
        return max(due_ms, self.blocked.get(queue, due_ms))


@dataclass(frozen=True, slots=True)
class Admission:
    """``ended``: the job does not run (expired, deferred); ``callable_limit``: the
    callable whose limit granted the start (its slot, if any, released after the attempt
    is settled; its row's due time is kept at start: the job may have been deferred)."""

    ended: Outcome | None = None
    callable_limit: str | None = None


class StartGate:
    def __init__(self, engine: Engine, settings: Settings,
                 server_now_ms: Callable[[], float]) -> None:
        self.engine, self.settings, self.server_now_ms = engine, settings, server_now_ms
        self._lock = threading.Lock()
        self._slots: dict[str, tuple[str, tuple[int, int] | None, int]] = {}  # id -> its limit

    def admit(self, job: ClaimedJob) -> Admission:
        """Whether ``job`` may start now; call right before its function."""
        env = job.payload
        if env is None:  # the runner ends it as an invalid row
            return Admission()
        if env.expires_ms is not None and self.server_now_ms() >= env.expires_ms:
            return Admission(ended=expired(job, env.path, env.expires_ms))
        if (limit := self.settings.callable_limit(env.path)) is None:
            return Admission()
        rate, concurrency = limit
        try:
            grant = self.engine.acquire(env.path, job.id, lease_ms=self.settings.lease_ms,
                                        rate=rate, concurrency=concurrency)
        except RedisError as exc:  # not the job's fault: try it again a little later
            logger.warning("job %s: could not ask for a start of %s (%s); deferred",
                           shown(job.id), shown(env.path), shown(exc))
            return Admission(ended=self.retry_later(job))
        if grant.granted:
            if concurrency is not None:  # a slot: renewed while the function runs
                with self._lock:
                    self._slots[job.id] = (env.path, rate, concurrency)
            return Admission(callable_limit=env.path)
        at: int = (grant.retry_at_ms if grant.retry_at_ms is not None
                   else int(self.server_now_ms()) + RETRY_AFTER_ERROR_MS)
        return Admission(ended=deferred(job, env.path, at))

    def retry_later(self, job: ClaimedJob) -> Outcome:
        """A start Redis could not decide on (a limit not asked, a start mark not
        written): not run, back to Redis ``RETRY_AFTER_ERROR_MS`` later, uncharged."""
        later = max(job.due_ms, int(self.server_now_ms()) + RETRY_AFTER_ERROR_MS)
        return deferred(job, job.payload.path if job.payload else "", later)

    def renew(self) -> None:
        """Extend the slots of the functions running now (the heartbeat calls this)."""
        with self._lock:
            slots = list(self._slots.items())
        for job_id, (path, rate, concurrency) in slots:
            self.engine.acquire(path, job_id, lease_ms=self.settings.lease_ms, rate=rate,
                                concurrency=concurrency)

    def release(self, outcomes: Sequence[Outcome]) -> None:
        """Free the slots of settled attempts (``Settler`` calls this after settling)."""
        with self._lock:
            for o in outcomes:
                if o.callable_limit is not None:
                    self._slots.pop(o.job.id, None)
        release_callable_slots(self.engine, outcomes)


def release_callable_slots(engine: Engine, outcomes: Iterable[Outcome]) -> None:
    """Free the callable-limit slots the settled ``outcomes`` held. A failure is logged:
    the slots free themselves when their lease passes."""
    slots: dict[str, list[str]] = {}
    for o in outcomes:
        if o.callable_limit is not None:
            slots.setdefault(o.callable_limit, []).append(o.job.id)
    for path, ids in slots.items():
        try:
            engine.release_callable(path, ids)
        except RedisError as exc:
            logger.warning("could not free %d slot(s) of %s (%s); they free themselves when "
                           "their lease passes", len(ids), shown(path), shown(exc))
