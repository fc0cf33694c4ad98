"""What the ``Engine``'s methods take and return: jobs to enqueue, leased jobs, outcomes
of settling and managing calls, a queue's counts and one job's place. Plain values, no
Redis: callers in every layer may hold them.
"""

from __future__ import annotations

import enum
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_delayq.engine.envelope import Envelope

# The clock leases are timed on in this process (``ClaimedJob.lease_until``, the worker's
# ledger): CLOCK_BOOTTIME where there is one (Linux), which counts on while the process is
# stopped and while the system is suspended, else the monotonic clock (stopped processes
# only). Neither counts the time a paused VM's guest clock was held.
lease_clock: Callable[[], float] = (
    functools.partial(time.clock_gettime, time.CLOCK_BOOTTIME)
    if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic)


class CancelOutcome(enum.IntEnum):
    NOT_FOUND = 0
    CANCELLED = 1
    ALREADY_RUNNING = 2


class NackOutcome(enum.IntEnum):
    LEASE_LOST = 0
    RETRYING = 1
    DEAD = 2
    CANCELLED = 3
    NOT_STARTED = 4  # recover.lua: a lost delivery that never started, due again uncharged


class MoveOutcome(enum.IntEnum):
    NOT_FOUND = 0
    MOVED = 1
    ALREADY_RUNNING = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class NewJob:
    """A job to enqueue: due at ``at_ms`` (absolute) or ``delay_ms`` after server now.

    ``envelope`` ``None``: Redis keeps only the id; whoever claims the job loads its
    payload from where it lives (django-delayq: the audit row)."""

    id: str
    envelope: str | None = None
    at_ms: int | None = None
    delay_ms: int = 0
    priority: int = 0  # -100..100: higher is claimed first among due jobs
    group: str = ""  # "": no group; else the job's group in its queue (docs/groups.md)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedJob:
    """A leased job. ``envelope`` is "" when Redis holds no payload for it; ``payload``
    is set once the claimer has loaded it from elsewhere."""

    queue: str
    id: str
    due_ms: int
    token: int  # the lease token (fencing): new at each delivery, maybe from the clock
    envelope: str
    attempt: int  # runs started so far, this one included if it starts (not the token)
    payload: Envelope | None = None
    home: str = ""  # the queue (shard) whose keys hold it, when not ``queue``
    # When its lease ends at the earliest (this process's ``lease_clock()``, which counts
    # on while the process is stopped): the claim's lease from the moment the claim
    # was first sent (a claim asked again after a lost reply: its first send). inf: not
    # known (an engine clock of its own, a job not from a claim). Not part of its identity.
    lease_until: float = field(default=math.inf, compare=False)
    # The claim's server time (ms): the stamp of its rate windows' entries, which a
    # deferral takes out (give_back.lua). -1: not from a claim. Not part of its identity.
    claimed_ms: int = field(default=-1, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class SetAside:
    """A poison entry a script (or the reply's decoding) took out of the way.

    ``removed``: gone from Redis (its id cannot be a job id; ``id`` is then only for the
    log: ASCII-escaped, cut). Otherwise the job is in the dead set under ``id``, and its
    audit row may be marked dead with ``reason``."""

    id: str
    reason: str
    removed: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimResult:
    """What a claim leased, and when the next one is worth making.

    ``next_due_ms``: None when nothing is known (empty queue, ``paused``, or the queue's
    concurrency limit is full: claim again after a job settles or at the poll interval);
    the rate limit's ``blocked_until_ms`` when it held jobs back; a time <= ``now_ms``
    while due jobs wait; else the earliest due time. ``paused``: the queue is paused,
    nothing was claimed. ``blocked_until_ms``: the queue's rate limit held back due jobs;
    a claim is let in again at that server time. ``limited``: a queue limit (rate or
    concurrency) held back due jobs. ``next_urgent_ms``: the due time of the earliest job
    of priority above 0 still waiting in pending (None: none, or a sharded queue), for a
    worker's timer that claims it at that time even while the worker is busy."""

    now_ms: int
    next_due_ms: int | None
    jobs: list[ClaimedJob]
    set_aside: list[SetAside] = field(default_factory=list)
    paused: bool = False
    blocked_until_ms: int | None = None
    limited: bool = False
    next_urgent_ms: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovered:
    id: str
    outcome: NackOutcome
    attempts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStats:
    now_ms: int
    scheduled: int
    ready: int
    inflight: int
    dead: int
    next_due_ms: int | None
    oldest_ready_ms: int | None
    expired_leases: int


@dataclass(frozen=True, slots=True, kw_only=True)
class JobLocation:
    place: str  # "pending" (pending or ready) | "inflight" | "dead" | "" (not in Redis)
    score_ms: int | None
    attempts: int
    envelope: str | None
    cancel_requested: bool
    priority: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueLimit:
    """A queue's limits, enforced by claim.lua: at most ``rate[0]`` claims in any window
    of ``rate[1]`` ms, at most ``concurrency`` jobs in flight. None: no such limit."""

    rate: tuple[int, int] | None = None
    concurrency: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    """A callable limit's answer (``Engine.acquire``). Refused: ``retry_at_ms`` is the
    server time at which a start is likely to be granted (spread across refused jobs)."""

    granted: bool
    retry_at_ms: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitState:
    """A callable limit's use now: grants in the last window, slots held."""

    started_in_window: int
    running: int


@dataclass(slots=True)
class Contact:
    """A caller's unbroken run of ``recover`` calls on one queue, on the server clock:
    ``since_ms`` its first reply, ``last_ms`` its latest (0: none yet). A gap longer than
    ``gap_ms`` (a Redis stall, a network cut, a busy caller) starts a new run. The script
    takes leases back only from a caller whose run is ``need_ms`` long and fresh: after a
    stall of Redis, every live worker has had that long to extend its leases."""

    need_ms: int
    gap_ms: int
    since_ms: int = 0
    last_ms: int = 0
    parts: dict[str, Contact] = field(default_factory=dict)  # per shard (its node's clock)

    def part(self, name: str) -> Contact:
        """The run of the calls on data set ``name`` (a shard: its own node and clock)."""
        return self.parts.setdefault(name, Contact(self.need_ms, self.gap_ms))

    def arg(self) -> str:
        return "%d,%d,%d,%d" % (self.since_ms, self.last_ms, self.need_ms, self.gap_ms)

    def seen(self, now_ms: int) -> None:
        if not self.last_ms or now_ms - self.last_ms > self.gap_ms:
            self.since_ms = now_ms
        self.last_ms = now_ms
