"""``Engine``: one method per Lua script. Integer milliseconds on the Redis clock.

The engine takes a redis-py client (``Redis`` or ``RedisCluster``, bytes or str
responses) and a key prefix. It validates nothing: layer 1 (``api``) does that.
Every ``now_ms`` argument is for tests; ``None`` means the server's ``TIME``.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django_delayq.engine import scripts
from django_delayq.engine.envelope import Envelope
from django_delayq.engine.keys import QueueKeys

MAX_BATCH = 1000


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _text(value: Any) -> str:
    """An envelope as text; bytes that are not UTF-8 become U+FFFD (and fail JSON later,
    so the job goes dead with a reason instead of stopping the worker)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _now(now_ms: int | None) -> int:
    return 0 if now_ms is None else int(now_ms)


class CancelOutcome(enum.IntEnum):
    NOT_FOUND = 0
    CANCELLED = 1
    ALREADY_RUNNING = 2


class NackOutcome(enum.IntEnum):
    LEASE_LOST = 0
    RETRYING = 1
    DEAD = 2
    CANCELLED = 3


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedJob:
    """A leased job. ``envelope`` is "" when Redis holds no payload for it; ``payload``
    is set once the claimer has loaded it from elsewhere."""

    queue: str
    id: str
    due_ms: int
    token: int
    envelope: str
    payload: Envelope | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimResult:
    now_ms: int
    next_due_ms: int | None
    jobs: list[ClaimedJob]


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
    place: str  # "pending" | "inflight" | "dead" | "" (not in Redis)
    score_ms: int | None
    attempts: int
    envelope: str | None
    cancel_requested: bool


def _opt(value: Any) -> int | None:
    number = int(value)
    return None if number < 0 else number


class Engine:
    """The Redis side of django-delayq. Thread-safe (redis-py clients are)."""

    def __init__(self, client: Any, prefix: str = "delayq") -> None:
        self.client = client
        self.prefix = prefix
        self._keys: dict[str, QueueKeys] = {}

    def keys(self, queue: str) -> QueueKeys:
        keys = self._keys.get(queue)
        if keys is None:
            keys = self._keys[queue] = QueueKeys(self.prefix, queue)
        return keys

    def _run(self, name: str, keys: tuple[str, ...], args: list[Any]) -> Any:
        return scripts.load(name)(self.client, keys, args)

    def time_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    # -- producing ------------------------------------------------------------------

    def enqueue(self, queue: str, jobs: Iterable[NewJob], now_ms: int | None = None) -> int:
        """Add jobs (idempotent by id); returns how many were new."""
        k = self.keys(queue)
        added = 0
        batch: list[Any] = []
        for job in jobs:
            at = -1 if job.at_ms is None else int(job.at_ms)
            batch += [job.id, at, int(job.delay_ms), job.envelope or ""]
            if len(batch) >= 4 * MAX_BATCH:
                added += self._enqueue_batch(k, batch, now_ms)
                batch = []
        if batch:
            added += self._enqueue_batch(k, batch, now_ms)
        return added

    def _enqueue_batch(self, k: QueueKeys, batch: list[Any], now_ms: int | None) -> int:
        reply = self._run("enqueue", (k.pending, k.jobs, k.inflight, k.dead),
                          [_now(now_ms), k.channel, *batch])
        return int(reply[0])

    # -- consuming ------------------------------------------------------------------

    def claim(
        self, queue: str, limit: int, lease_ms: int, now_ms: int | None = None
    ) -> ClaimResult:
        """Lease up to ``limit`` due jobs; also reports when the next one is due."""
        k = self.keys(queue)
        reply = self._run(
            "claim",
            (k.pending, k.inflight, k.jobs, k.attempts),
            [_now(now_ms), max(1, min(limit, MAX_BATCH)), int(lease_ms)],
        )
        jobs = [
            ClaimedJob(
                queue=queue,
                id=_s(reply[i]),
                due_ms=int(float(reply[i + 1])),
                token=int(reply[i + 2]),
                envelope=_text(reply[i + 3]),
            )
            for i in range(2, len(reply), 4)
        ]
        return ClaimResult(now_ms=int(reply[0]), next_due_ms=_opt(reply[1]), jobs=jobs)

    def ack(self, queue: str, leases: Sequence[tuple[str, int]]) -> list[bool]:
        """Settle successes. ``leases`` are (id, token); False = lease lost, refused."""
        if not leases:
            return []
        k = self.keys(queue)
        args = [v for id_, token in leases for v in (id_, token)]
        reply = self._run("ack", (k.inflight, k.jobs, k.attempts, k.cancel), args)
        return [bool(int(r)) for r in reply]

    def nack(
        self,
        queue: str,
        failures: Sequence[tuple[str, int, int | None]],
        *,
        dead_max: int = 100_000,
        now_ms: int | None = None,
    ) -> list[NackOutcome]:
        """Settle failures: (id, token, retry_delay_ms or None for dead)."""
        if not failures:
            return []
        k = self.keys(queue)
        args: list[Any] = [_now(now_ms), k.channel, dead_max]
        for id_, token, delay in failures:
            args += [id_, token, -1 if delay is None else max(0, int(delay))]
        reply = self._run(
            "nack", (k.pending, k.inflight, k.jobs, k.attempts, k.cancel, k.dead), args
        )
        return [NackOutcome(int(r)) for r in reply]

    def extend(
        self,
        queue: str,
        leases: Sequence[tuple[str, int]],
        lease_ms: int,
        now_ms: int | None = None,
    ) -> list[bool]:
        """Heartbeat: push lease deadlines to now + lease_ms. False = lease lost."""
        if not leases:
            return []
        k = self.keys(queue)
        args: list[Any] = [_now(now_ms), int(lease_ms)]
        args += [v for id_, token in leases for v in (id_, token)]
        return [bool(int(r)) for r in self._run("extend", (k.inflight, k.attempts), args)]

    def release(self, queue: str, claimed: Sequence[ClaimedJob]) -> list[bool]:
        """Undo claims of jobs that never started (graceful shutdown)."""
        if not claimed:
            return []
        k = self.keys(queue)
        args: list[Any] = [k.channel]
        for job in claimed:
            args += [job.id, job.token, job.due_ms]
        reply = self._run("release", (k.pending, k.inflight, k.attempts), args)
        return [bool(int(r)) for r in reply]

    def recover(
        self,
        queue: str,
        *,
        limit: int = 100,
        default_max_attempts: int = 3,
        dead_max: int = 100_000,
        max_attempts: Mapping[str, int] | None = None,
        now_ms: int | None = None,
    ) -> list[Recovered]:
        """Take back up to ``limit`` expired leases (dead workers). ``max_attempts``
        gives the limit of jobs without an envelope in Redis (see ``expiring``)."""
        k = self.keys(queue)
        given = [v for item in (max_attempts or {}).items() for v in item]
        reply = self._run(
            "recover",
            (k.pending, k.inflight, k.jobs, k.attempts, k.cancel, k.dead),
            [_now(now_ms), limit, default_max_attempts, k.channel, dead_max, *given],
        )
        return [
            Recovered(id=_s(reply[i]), outcome=NackOutcome(int(reply[i + 1])),
                      attempts=int(reply[i + 2]))
            for i in range(0, len(reply), 3)
        ]

    def expiring(self, queue: str, within_ms: int, limit: int = 100) -> list[str]:
        """Ids whose lease ends within ``within_ms`` of the local clock (or has ended):
        the candidates of the next ``recover``, for looking up their ``max_attempts``."""
        horizon = int(time.time() * 1000) + within_ms
        ids = self.client.zrangebyscore(self.keys(queue).inflight, "-inf", horizon, 0, limit)
        return [_s(i) for i in ids]

    # -- managing -------------------------------------------------------------------

    def cancel(self, queue: str, job_id: str) -> CancelOutcome:
        k = self.keys(queue)
        reply = self._run(
            "cancel", (k.pending, k.inflight, k.jobs, k.attempts, k.cancel, k.dead), [job_id]
        )
        return CancelOutcome(int(reply))

    def reschedule(
        self,
        queue: str,
        job_id: str,
        *,
        at_ms: int | None = None,
        delay_ms: int = 0,
        now_ms: int | None = None,
    ) -> tuple[MoveOutcome, int | None]:
        """Move a pending job; ``delay_ms=0`` with no ``at_ms`` is "run now"."""
        k = self.keys(queue)
        at = -1 if at_ms is None else int(at_ms)
        reply = self._run(
            "reschedule",
            (k.pending, k.inflight),
            [_now(now_ms), k.channel, job_id, at, int(delay_ms)],
        )
        return MoveOutcome(int(reply[0])), _opt(reply[1])

    def requeue(
        self, queue: str, job_id: str, *, delay_ms: int = 0, now_ms: int | None = None
    ) -> tuple[MoveOutcome, int | None]:
        """Dead -> pending with a fresh set of attempts."""
        k = self.keys(queue)
        reply = self._run(
            "requeue",
            (k.pending, k.dead, k.attempts),
            [_now(now_ms), k.channel, job_id, int(delay_ms)],
        )
        return MoveOutcome(int(reply[0])), _opt(reply[1])

    def stats(self, queue: str, now_ms: int | None = None) -> QueueStats:
        k = self.keys(queue)
        r = [int(v) for v in self._run("stats", (k.pending, k.inflight, k.dead), [_now(now_ms)])]
        return QueueStats(
            now_ms=r[0], scheduled=r[1], ready=r[2], inflight=r[3], dead=r[4],
            next_due_ms=_opt(r[5]), oldest_ready_ms=_opt(r[6]), expired_leases=r[7],
        )

    def inspect(self, queue: str, job_id: str) -> JobLocation:
        k = self.keys(queue)
        r = self._run(
            "inspect", (k.pending, k.inflight, k.dead, k.jobs, k.attempts, k.cancel), [job_id]
        )
        return JobLocation(
            place=_s(r[0]),
            score_ms=_opt(r[1]),
            attempts=int(r[2]),
            envelope=_s(r[3]) if r[3] else None,
            cancel_requested=bool(int(r[4])),
        )

    def purge(self, queue: str) -> None:
        """Delete every key of ``queue``: the engine's and any other under its hash tag
        (the reconciler's epoch, ...). SCANs the keyspace: for tests and admin tools."""
        tag = self.keys(queue).tag
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in tag) + "*"
        extra = list(self.client.scan_iter(match=pattern, count=1000))
        self.client.delete(*self.keys(queue).all(), *extra)
