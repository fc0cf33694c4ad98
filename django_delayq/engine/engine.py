"""``Engine``: one method per Lua script. Integer milliseconds on the Redis clock.

The engine takes a redis-py client (``Redis`` or ``RedisCluster``, bytes or str
responses) and a key prefix. It validates what it hands to Redis only as far as the
scripts need (job ids, see ``bad_id``); layer 1 (``api``) validates the rest.
Every ``now_ms`` argument is for tests; ``None`` means the server's ``TIME``.

**Bounded calls.** Each method splits its list into chunks of at most the script's
bound (``scripts.MAX_*``), one script call each: a call never holds Redis for long,
however many jobs the caller settles at once.

**Poison entries.** Redis may hold values no script wrote (by hand, by a bug, by an
attacker): ids that are not UTF-8, scores of -inf, attempts that are not numbers. The
scripts set such an entry aside alone (``SetAside``) and serve the rest of the batch.
Replies are decoded item by item: an item that still cannot be decoded is removed
from Redis with a WARNING naming it (repr), never an exception after a script has
committed its writes.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from django_delayq.engine import logtext, replies, scripts
from django_delayq.engine.acks import AckStream, plain_sockets
from django_delayq.engine.controls import QueueControls
from django_delayq.engine.event_log import EventLog
from django_delayq.engine.keys import GlobalKeys, QueueKeys
from django_delayq.engine.outbox import OutboxOps
from django_delayq.engine.outcomes import (
    CancelOutcome,
    ClaimedJob,
    ClaimResult,
    Contact,
    JobLocation,
    MoveOutcome,
    NackOutcome,
    NewJob,
    QueueStats,
    Recovered,
    SetAside,
    lease_clock,
)
from django_delayq.engine.replies import bad_id
from django_delayq.engine.server import ServerReads

logger = logging.getLogger(__name__)

MAX_BATCH = scripts.MAX_CLAIM  # most jobs one claim leases
__all__ = ["Engine", "bad_id"]
_T = TypeVar("_T")


class Engine(OutboxOps, ServerReads, QueueControls):
    """The Redis side of django-delayq. Thread-safe (redis-py clients are).

    The scripts' methods and the leases' reads and start marks are here; the
    reconciler's look-ups and re-enqueues (``outbox.py``), the operators' reads and the
    workers registry (``server.py``), pause, purge, queue limits and the callable limits
    (``controls.py``) come from the classes in their own modules."""

    def __init__(self, client: Any, prefix: str = "delayq",
                 clock: Callable[[], int] | None = None) -> None:
        super().__init__(client, prefix, clock)
        self._claimer = os.urandom(6).hex()  # names this engine's claims (claim_record)
        self._claim_seq = itertools.count(1)
        # claims whose reply was lost: their nonce, and when the first was sent (lease_clock)
        self._claim_nonces: dict[tuple[str, str], tuple[str, float]] = {}
        self._keys: dict[str, QueueKeys] = {}
        self._script_keys: dict[tuple[str, str], tuple[str, ...]] = {}  # (script, queue)

    def keys(self, queue: str) -> QueueKeys:
        keys = self._keys.get(queue)
        if keys is None:
            keys = self._keys[queue] = QueueKeys(self.prefix, queue)
        return keys

    @property
    def global_keys(self) -> GlobalKeys:
        return GlobalKeys(self.prefix)

    def _keys_of(self, name: str, queue: str) -> tuple[str, ...]:
        """The ``KEYS`` of script ``name`` on ``queue``, built once per pair (the job
        threads' and the claimer's paths ask for them at every call)."""
        keys = self._script_keys.get((name, queue))
        if keys is None:
            keys = self._script_keys[(name, queue)] = scripts.keys_of(name, self.keys(queue))
        return keys

    def _run(self, name: str, keys: tuple[str, ...], args: list[Any]) -> Any:
        return scripts.load(name)(self.client, keys, args)

    def _script(self, name: str, queue: str, args: list[Any], **extra: str | None) -> Any:
        keys = scripts.keys_of(name, self.keys(queue), **extra) if extra else \
            self._keys_of(name, queue)
        return self._run(name, keys, args)

    def _per_item(self, name: str, queue: str, now_ms: int | None, head: list[Any],
                  rows: Sequence[Sequence[Any]], **extra: str | None) -> list[int]:
        """Script ``name`` over ``rows`` (each item's ARGV), in calls of at most its bound
        of items, each with ARGV now, ``head``, then its rows (``extra``: named keys, as
        ``_script``); one integer per row."""
        return [int(r) for part in replies.chunks(rows, scripts.BOUNDS[name].items)
                for r in self._script(name, queue, [self._now(now_ms), *head,
                                                    *(value for row in part for value in row)],
                                      **extra)]

    def _flags(self, name: str, queue: str, now_ms: int | None, head: list[Any],
               rows: Sequence[Sequence[Any]]) -> list[bool]:
        """``_per_item`` of a script answering 1 (done) or 0 (the lease was lost) per row."""
        return [bool(r) for r in self._per_item(name, queue, now_ms, head, rows)]

    def event_log(self, maxlen: int) -> EventLog:
        """The event streams of this prefix, each capped near ``maxlen`` entries; each
        event goes to ``event_stream_of`` its queue and job."""
        route = (lambda f: self.event_stream_of(f.get("queue", ""), f.get("job", ""))) \
            if self.routes_events else None
        return EventLog(self.client, self.global_keys.events, maxlen, route=route)

    @property
    def routes_events(self) -> bool:
        """Whether events go to more than one stream (``event_stream_of``): a sharded
        queue's go to its shards' nodes; without one every event is routed to the same
        stream, and ``EventLog`` is told not to ask, event by event."""
        return False

    # -- poison entries -------------------------------------------------------------

    def _log_aside(self, queue: str, script: str, entries: list[SetAside]) -> None:
        for entry in entries:  # a removed id comes already escaped (\xHH), ASCII only
            shown = "b'%s'" % entry.id if entry.removed else replies.shown(entry.id)
            logger.warning("queue %r: %s set aside job %s (%s): %s", queue, script, shown,
                           entry.reason,
                           "removed from Redis" if entry.removed else "moved to dead")

    def _drop_undecodable(self, queue: str, raw_ids: list[Any], why: str) -> list[SetAside]:
        """Remove ids a reply carried but Python cannot decode (the scripts should have
        set them aside already): out of every place of the queue, with a WARNING."""
        k = self.keys(queue)
        pipe = self.client.pipeline(transaction=True)
        for placed in (k.pending, k.ready, k.inflight):
            pipe.zrem(placed, *raw_ids)
        for known in (k.jobs, k.attempts, k.prio, k.group):
            pipe.hdel(known, *raw_ids)
        pipe.srem(k.cancel, *raw_ids)
        pipe.execute()
        out = [SetAside(id=replies.escaped(raw), reason=why, removed=True) for raw in raw_ids]
        self._log_aside(queue, "decoding", out)
        return out

    def _decoded(self, queue: str, script: str, reply: Sequence[Any], at: int, size: int,
                 make: Callable[[Sequence[Any]], _T]) -> tuple[list[_T], list[SetAside], int]:
        """The entries ``reply``'s section at ``at`` set aside (logged), ``make`` of each
        item (``size`` values) after them, and where the items start; the id of an item
        that cannot be decoded is removed from Redis and set aside too."""
        start = at + 1 + 3 * int(reply[at])  # n, then n triples: id, reason, removed (1/0)
        aside = [SetAside(id=replies.loose(reply[i]), reason=replies.text(reply[i + 1]),
                          removed=bool(int(reply[i + 2]))) for i in range(at + 1, start, 3)]
        self._log_aside(queue, script, aside)
        found: list[_T] = []
        bad: list[Any] = []
        for i in range(start, len(reply) - size + 1, size):
            try:
                found.append(make(reply[i:i + size]))
            except (UnicodeDecodeError, ValueError, TypeError) as exc:
                bad.append(reply[i])
                logger.debug("%s reply item %s: %s", script, replies.shown(reply[i]),
                             logtext.shown(exc))
        if bad:
            aside += self._drop_undecodable(queue, bad, "%s id could not be decoded" % (
                "claimed" if script == "claim" else "recovered"))
        return found, aside, start

    # -- producing ------------------------------------------------------------------

    def enqueue(self, queue: str, jobs: Iterable[NewJob], now_ms: int | None = None) -> int:
        """Add jobs (idempotent by id); returns how many were new. ``ValueError`` for
        an id the scripts would refuse (``bad_id``), before anything is sent. A job's
        ``priority`` (-100..100) orders it among due jobs; 0 costs no extra memory, and
        neither does no ``group``."""
        flat: list[Any] = []  # each job's 6 ARGV, one after the other
        for job in checked(jobs):
            flat += (job.id, -1 if job.at_ms is None else int(job.at_ms), int(job.delay_ms),
                     job.envelope or "", int(job.priority), job.group)
        step, added = 6 * scripts.MAX_ENQUEUE, 0
        for i in range(0, len(flat), step):
            added += int(self._script("enqueue", queue, [self._now(now_ms),
                                                         self.keys(queue).channel,
                                                         *flat[i:i + step]])[0])
        return added

    # -- consuming ------------------------------------------------------------------

    def claim(self, queue: str, limit: int, lease_ms: int,
              now_ms: int | None = None) -> ClaimResult:
        """Lease up to ``limit`` (at most ``MAX_BATCH``) due jobs, higher priority first,
        equal priority in due order; also reports when a claim is next worth making, a
        pause or a queue limit that held jobs back, and the poison entries set aside on
        the way (``set_aside``). See ``ClaimResult`` and lua/claim.lua."""
        k = self.keys(queue)
        # A claim whose reply is lost (a timeout, a dropped connection) leased jobs nobody
        # knows of: the next claim of this thread on this queue asks again under the same
        # nonce and gets them (lua/claim.lua), instead of leaving them to their lease's end.
        claimer = "%s:%d" % (self._claimer, threading.get_ident())
        lost = self._claim_nonces.pop((queue, claimer), None)
        nonce, sent = lost if lost is not None else ("%x%s" % (
            next(self._claim_seq), os.urandom(6).hex()), lease_clock())  # not guessable
        try:
            reply = self._script("claim", queue, [self._now(now_ms), max(1, min(limit, MAX_BATCH)),
                                                  int(lease_ms), nonce],
                                 record=k.claim_record(claimer))
        except Exception:
            self._claim_nonces[(queue, claimer)] = (nonce, sent)
            raise
        # the leases run on the server's clock from the call at the earliest: this
        # process's clock from the send is behind them (unknown on a clock of our own)
        until = sent + lease_ms / 1000 if now_ms is None and self.clock is None else math.inf
        jobs, aside, _ = self._decoded(queue, "claim", reply, 6, 5, lambda r: ClaimedJob(
            queue=queue, id=replies.text(r[0]), due_ms=int(r[1]), token=int(r[2]),
            attempt=int(r[3]), envelope=replies.envelope_text(r[4]), home=queue,
            lease_until=until, claimed_ms=int(reply[0])))
        return ClaimResult(now_ms=int(reply[0]), next_due_ms=replies.opt(reply[1]), jobs=jobs,
                           set_aside=aside, paused=bool(int(reply[2])),
                           blocked_until_ms=replies.opt(reply[3]), limited=bool(int(reply[4])),
                           next_urgent_ms=replies.opt(reply[5]))

    def ack(self, queue: str, leases: Sequence[tuple[str, int]], *, holder: str = "",
            codes: Sequence[str] | None = None, now_ms: int | None = None) -> list[bool]:
        """Settle successes. ``leases`` are (id, token); False = lease lost, refused.

        With a ``holder`` (the worker's registry id) Redis keeps a settled record of
        each acked job (``codes[i]``: "s" succeeded, the default, or "x" expired) until
        ``forget_settled``: the reconciler reads it instead of taking the job for lost."""
        marks = list(codes) if codes is not None else ["s"] * len(leases)
        return self._acked(queue, [(i, t, c) for (i, t), c in zip(leases, marks)], holder,
                           now_ms)

    def _acked(self, queue: str, rows: Sequence[tuple[str, int, str]], holder: str,
               now_ms: int | None) -> list[bool]:
        """``ack`` of (id, token, code) ``rows`` (a sharded queue's go to their shards)."""
        return self._flags("ack", queue, now_ms, [holder, self.keys(queue).channel], rows)

    def nack(self, queue: str, failures: Sequence[tuple[str, int, int | None]], *,
             dead_max: int = 100_000, now_ms: int | None = None,
             holder: str = "", record: bool = True) -> list[NackOutcome]:
        """Settle failures: (id, token, retry_delay_ms or None for dead). With a
        ``holder``, a job cancelled while it ran keeps a settled record (see ``ack``), and
        the holder's nack record (``QueueKeys.nack_record``, of ``queue``: a shard's own;
        not with ``record=False``) answers the same nack sent again after its reply was
        lost with the first's outcome."""
        rows = [(id_, token, -1 if delay is None else max(0, int(delay)))
                for id_, token, delay in failures]
        k = self.keys(queue)
        return [NackOutcome(r) for r in self._per_item(
            "nack", queue, now_ms, [k.channel, dead_max, holder], rows,
            **({"nacked": k.nack_record(holder)} if holder and record else {}))]

    def ack_stream(self, holder: str) -> AckStream | None:
        """An ``AckStream`` (engine/acks.py) settling successes for ``holder`` on a
        connection of its own; None when the client has no single connection (a
        cluster): use ``ack``."""
        pool = getattr(self.client, "connection_pool", None)
        if pool is None or not hasattr(pool, "get_connection") or not plain_sockets(pool):
            return None  # a cluster (no single connection), or TLS (one thread at a time)
        return AckStream(self.client, self.keys, holder)

    def start_mark(self, job: ClaimedJob) -> tuple[tuple[str, ...], list[str]]:
        """(KEYS, ARGV) of lua/mark.lua marking ``job``'s run started."""
        keys = self._keys_of("mark", job.home or job.queue)  # a job thread's path
        return keys, [job.id, str(job.token), str(job.token - job.attempt)]

    def mark_started(self, jobs: Sequence[ClaimedJob]) -> int:
        """Mark the runs of ``jobs`` started, before their functions are called: a lease
        of theirs taken back by recovery then counts as an attempt (lua/recover.lua).
        Returns how many were still held (marked)."""
        calls: dict[tuple[str, ...], list[str]] = {}
        for job in jobs:
            keys, args = self.start_mark(job)
            calls.setdefault(keys, []).extend(args)
        return sum(int(self._run("mark", keys, list(part))) for keys, args in calls.items()
                   for part in replies.chunks(args, 3 * scripts.MAX_MARK))

    def expiring(self, queue: str, within_ms: int, limit: int = 100) -> list[str]:
        """Ids whose lease ends within ``within_ms`` of the local clock (or has ended):
        the candidates of the next ``recover``, for looking up their ``max_attempts``.
        Ids that are not valid job ids are left out (``recover`` sets them aside)."""
        horizon = int(time.time() * 1000) + within_ms
        ids = self.client.zrangebyscore(self.keys(queue).inflight, "-inf", horizon, 0, limit)
        out = []
        for raw in ids:
            try:
                job_id = replies.text(raw)
            except UnicodeDecodeError:
                job_id = ""
            if job_id and bad_id(job_id) is None:
                out.append(job_id)
            else:
                logger.debug("queue %r: lease of a poison id %s left to recover", queue,
                             replies.shown(raw))
        return out

    def forget_settled(self, queue: str, job_ids: Sequence[str], *, keep_ms: int,
                       now_ms: int | None = None) -> int:
        """Drop the settled records of ``job_ids`` (their audit rows have landed) and up to
        100 records older than ``keep_ms`` per call; returns how many of ``job_ids`` had one."""
        parts = list(replies.chunks(job_ids, scripts.MAX_FORGET)) or [[]]  # []: the old ones
        return sum(int(self._script("forget_settled", queue,
                                    [self._now(now_ms), int(keep_ms), *part])[0])
                   for part in parts)

    def extend(self, queue: str, leases: Sequence[tuple[str, int]], lease_ms: int,
               now_ms: int | None = None) -> list[bool]:
        """Heartbeat: push lease deadlines to now + lease_ms. False = lease lost."""
        return self._flags("extend", queue, now_ms, [int(lease_ms)], leases)

    def release(self, queue: str, claimed: Sequence[ClaimedJob],
                now_ms: int | None = None, *, unclaim: bool = False) -> list[bool]:
        """Undo claims of jobs never started (a drain; ``unclaim``, a trim: rate claims too)."""
        rows = [(j.id, j.token, j.due_ms, j.claimed_ms if unclaim else -1) for j in claimed]
        return self._flags("give_back", queue, now_ms, [self.keys(queue).channel, "release"], rows)

    def defer(self, queue: str, leases: Sequence[tuple[Any, ...]],
              now_ms: int | None = None) -> list[bool]:
        """Put jobs in flight, (id, token, at_ms[, claimed_ms]), back in line due at ``at_ms``,
        their attempt and (``ClaimedJob.claimed_ms`` given) rate claims given back. False:
        the lease was lost, nothing done."""
        rows = [(x[0], int(x[1]), int(x[2]), int(x[3]) if len(x) > 3 else -1) for x in leases]
        return self._flags("give_back", queue, now_ms, [self.keys(queue).channel, "defer"],
                           rows)

    def recover(self, queue: str, *, limit: int = 100, default_max_attempts: int = 3,
                dead_max: int = 100_000, max_attempts: Mapping[str, int] | None = None,
                now_ms: int | None = None, set_aside: list[SetAside] | None = None,
                contact: Contact | None = None) -> list[Recovered]:
        """Take back up to ``limit`` expired leases (dead workers), in calls of at most
        ``scripts.MAX_RECOVER``. ``max_attempts`` gives the limit of jobs without an
        envelope in Redis (see ``expiring``; at most ``MAX_RECOVER`` entries are used).
        Poison entries met on the way are logged and appended to ``set_aside``.

        ``contact``: the caller's unbroken run of calls on this queue (recover.lua's
        ARGV[6]); nothing is taken back while it is shorter than its ``need_ms``, and each
        reply's server time extends it (``Contact.seen``)."""
        k = self.keys(queue)
        given = [v for item in list((max_attempts or {}).items())[:scripts.MAX_RECOVER]
                 for v in item]
        found: list[Recovered] = []
        left = max(1, limit)
        while left > 0:
            size = min(left, scripts.MAX_RECOVER)
            reply = self._script("recover", queue, [
                self._now(now_ms), size, default_max_attempts, k.channel, dead_max,
                contact.arg() if contact is not None else "", *given])
            if contact is not None:
                contact.seen(int(reply[0]))
            items, aside, start = self._decoded(queue, "recover", reply, 1, 3, lambda r: Recovered(
                id=replies.text(r[0]), outcome=NackOutcome(int(r[1])), attempts=int(r[2])))
            found += items
            if set_aside is not None:
                set_aside += aside
            handled = (len(reply) - start) // 3 + len(aside)
            if handled < size:
                break
            left -= size
        return found

    # -- managing -------------------------------------------------------------------

    def cancel(self, queue: str, job_id: str) -> CancelOutcome:
        """lua/cancel.lua: a job finished a moment ago (settled) is not found."""
        return self._cancel(queue, job_id, 0) or CancelOutcome.NOT_FOUND

    def cancel_held(self, queue: str, job_id: str, hold_ms: int) -> CancelOutcome | None:
        """lua/cancel.lua, a job found nowhere held back ``hold_ms``, should it arrive (a
        cancel whose row decides, its transaction still open); None: Redis settled the
        job a moment ago (its worker's row is coming, no hold)."""
        return self._cancel(queue, job_id, hold_ms)

    def _cancel(self, queue: str, job_id: str, hold_ms: int) -> CancelOutcome | None:
        reply = int(self._script("cancel", queue, [job_id, int(hold_ms)]))
        return None if reply == 3 else CancelOutcome(reply)

    def reschedule(self, queue: str, job_id: str, *, at_ms: int | None = None,
                   delay_ms: int = 0, now_ms: int | None = None
                   ) -> tuple[MoveOutcome, int | None]:
        """Move a pending job; ``delay_ms=0`` with no ``at_ms`` is "run now"."""
        return self._move(queue, now_ms, job_id, "waiting", at_ms, delay_ms)

    def requeue(self, queue: str, job_id: str, *, delay_ms: int = 0,
                now_ms: int | None = None) -> tuple[MoveOutcome, int | None]:
        """Dead -> pending with a fresh set of attempts."""
        return self._move(queue, now_ms, job_id, "dead", None, delay_ms)

    def _move(self, queue: str, now_ms: int | None, job_id: str, place: str,
              at_ms: int | None, delay_ms: int) -> tuple[MoveOutcome, int | None]:
        """lua/move.lua moving one job from ``place``: its outcome and due time."""
        reply = self._script("move", queue, [self._now(now_ms), self.keys(queue).channel, job_id,
                                             place, -1 if at_ms is None else int(at_ms),
                                             int(delay_ms)])
        return MoveOutcome(int(reply[0])), replies.opt(reply[1])

    def stats(self, queue: str, now_ms: int | None = None) -> QueueStats:
        """Counts of ``queue``: ``ready`` counts every due job (promoted to ready or not),
        ``oldest_ready_ms`` is the earliest due time among them."""
        r = [int(v) for v in self._script("stats", queue, [self._now(now_ms)])[:8]]
        return QueueStats(now_ms=r[0], scheduled=r[1], ready=r[2], inflight=r[3], dead=r[4],
                          next_due_ms=replies.opt(r[5]), oldest_ready_ms=replies.opt(r[6]),
                          expired_leases=r[7])

    def inspect(self, queue: str, job_id: str) -> JobLocation:
        """Where one job is. A score that is not a time reads as None, an attempts
        value that is not a number as -1, an envelope that is not UTF-8 with U+FFFD."""
        r = self._script("inspect", queue, [job_id])
        return JobLocation(place=replies.text(r[0]), score_ms=replies.opt(r[1]),
                           attempts=int(r[2]),
                           envelope=replies.envelope_text(r[3]) if r[3] else None,
                           cancel_requested=bool(int(r[4])), priority=int(r[5]))

    def purge(self, queue: str) -> None:
        """Delete every key of ``queue``: the engine's and any other under its hash tag
        (the reconciler's epoch, ...). SCANs the keyspace: for tests and admin tools."""
        self._delete_tagged(self.keys(queue).tag, *self.keys(queue).all())

    def purge_global(self) -> None:
        """Delete the keys under the prefix's own hash tag (``{prefix}``: the workers
        registry, the event stream, ...), not the queues'. SCANs the keyspace: for tests."""
        self._delete_tagged(self.global_keys.tag)

    def _delete_tagged(self, tag: str, *known: str) -> None:
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in tag) + "*"
        keys = [*known, *self.client.scan_iter(match=pattern, count=1000)]
        if keys:
            self.client.delete(*keys)


def checked(jobs: Iterable[NewJob]) -> list[NewJob]:
    """``jobs`` as a list; ``ValueError`` for an id the scripts would refuse (``bad_id``),
    before anything is sent."""
    jobs = list(jobs)
    for job in jobs:
        if (why := bad_id(job.id)) is not None:
            raise ValueError("job id %s: %s" % (replies.shown(job.id), why))
    return jobs

