"""Every Redis key django-delayq uses, named here and nowhere else.

``QueueKeys``: the keys of one queue, under one hash tag ``{prefix:queue}`` (one Redis
Cluster slot, so a script or MULTI may touch them all). ``GlobalKeys``: the keys shared
by every queue under a prefix (the workers registry, the event stream), under the hash
tag ``{prefix}``.
"""

from __future__ import annotations

from dataclasses import dataclass


class Key:
    """A key name of the keys classes below: their ``tag``, then ``:<suffix>`` (the
    attribute's own name unless given)."""

    def __init__(self, suffix: str = "") -> None:
        self.suffix = ":" + suffix if suffix else ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.suffix = self.suffix or ":" + name  # (a slots dataclass calls it again)

    def __get__(self, keys: QueueKeys | CallableLimitKeys | GlobalKeys, owner: type) -> str:
        return keys.tag + self.suffix


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Key names of queue ``queue`` under ``prefix``: all share ``{prefix:queue}``."""

    prefix: str
    queue: str

    @property
    def tag(self) -> str:
        return "{%s:%s}" % (self.prefix, self.queue)

    pending = Key()
    inflight = Key()
    jobs = Key()
    attempts = Key()
    cancel = Key()
    dead = Key()

    # Pub/Sub channel told the new earliest due time of the queue.
    channel = Key("wake")

    # When (and by whom) this queue's data was first written: ``<ms>:<token>:<kind>``
    # (enqueue.lua creates it; the reconciler reads it to tell a data loss).
    epoch = Key()

    # ZSET id -> server ms: jobs a reconciler re-enqueued moments ago.
    reconciled = Key()

    # ZSET ready score -> id: due jobs in claim order, priority first, then due time
    # (lua/lib.lua ``ready_score``). Every job in it is due no later than every job of
    # ``pending``.
    ready = Key()

    # HASH id -> priority, only for jobs whose priority is not 0 (pending, ready, in
    # flight or dead); forgotten with the job.
    prio = Key()

    # HASH id -> group, only for jobs of a group (``schedule(group=...)``), for as
    # long as the job lives (dead included); forgotten with the job (docs/groups.md).
    group = Key()

    # ZSET, every score 0: the index of ``ready``'s jobs by group while the queue is
    # grouped, member ``<group>\n<ready score, 16 digits><id>`` (lua/lib.lua
    # ``group_index``; ``ready`` stays the truth).
    group_ready = Key()

    # ZSET group -> turn: the groups with indexed due jobs, in round-robin order
    # (claim.lua serves the lowest turn and moves it to the end).
    group_turns = Key()

    # SET: the paused groups of the queue (lua/group_control.lua); claim.lua takes
    # none of their jobs.
    group_paused = Key()

    # HASH group -> ``<rate> <per_ms> <concurrency>``: the groups whose limits differ
    # from the queue's defaults (``limit``'s ``group_*`` fields), -1 where a group keeps
    # the default. A setting, like ``limit``: the database holds it too (GroupLimit).
    group_limits = Key()

    # ZSET, every score 0: the grouped jobs in flight, member ``<group>\n<id>``; a
    # group's count is one ZLEXCOUNT (its concurrency). Written by claim.lua, emptied by
    # every script that takes a job out of ``inflight`` (lua/lib.lua ``group_slots``).
    group_running = Key()

    # ZSET, every score 0: the claims of the rate-limited groups, member
    # ``<group>\n<claim ms, 16 digits><id>:<token>``; a group's count in its window is
    # one ZLEXCOUNT.
    group_starts = Key()

    # ZSET ms -> member of ``group_starts``: when each start leaves its group's
    # window (claim.lua drops the expired ones from both, at most 100 a call).
    group_expiry = Key()

    # ZSET group -> ms: the groups a limit took out of the rotation, and when a claim
    # looks at them again (a settle of one of their jobs puts them back sooner).
    group_held = Key()

    # ZSET due_ms -> id: an index of the jobs of ``pending`` whose priority is above 0,
    # so claim.lua promotes their due ones ahead of a backlog due before them (the job
    # stays in ``pending`` too; an entry whose job left pending is dropped when read).
    urgent = Key()

    # STRING, present while the queue is paused (value: when, Redis ms).
    paused = Key()

    # ZSET id -> server ms: cancels whose row decided (cancel.lua found the job nowhere
    # in Redis: its send not landed yet, inside the canceller's open transaction). A job
    # of it that arrives (enqueue.lua, reenqueue.lua) waits in pending until that ms, and
    # the cancel sent after the canceller's commit removes job and hold together.
    hold = Key()

    # HASH of the queue's limits: ``rate`` and ``per_ms`` (claims per window),
    # ``concurrency`` (jobs in flight at once). Absent: no limit.
    limit = Key()

    # ZSET ``<id>:<token>:<ms>`` -> claim ms: the claims of the rate limit's window.
    starts = Key()

    # ZSET id -> server ms: jobs this Redis settled (acked, or cancelled while they
    # ran) for a worker whose audit row has not landed yet. The worker forgets the entry
    # once the row is written; until then the reconciler reads it instead of taking the
    # job for lost (a stalled database, a worker killed before its flush).
    settled = Key()

    # HASH id -> ``<code> <attempt> <holder> <token>``: how ``settled`` ended the job
    # (``s`` succeeded, ``x`` expired, ``c`` cancelled), in which attempt, by which
    # worker (its registry id), under which lease token (``outbox.Settled``).
    settled_by = Key()

    # STRING: the highest shard count the queue's data was written with (only for a
    # queue ever sharded: on shard 0, and the same value on each other shard;
    # engine/shard_map.py).
    shards = Key()

    # STREAM: the event stream of the jobs of one shard of a sharded queue, on the
    # shard's node (engine/event_log.py); other queues' events are in ``GlobalKeys``'.
    events = Key()

    def all(self) -> tuple[str, ...]:
        """The keys holding jobs (not the queue's settings: paused, limit, starts,
        group_limits)."""
        return (self.pending, self.inflight, self.jobs, self.attempts, self.cancel, self.dead,
                self.ready, self.prio, self.urgent, self.settled, self.settled_by, self.runs,
                self.group, self.group_ready, self.group_turns, self.group_running,
                self.group_starts, self.group_expiry, self.group_held)

    # HASH id -> ``<token> <offset> <streak>``: the last delivery (lease token) whose
    # run started, marked by its worker before the function is called; how far the
    # job's tokens run ahead of its attempts (deliveries that never started: their
    # worker died first; numbers a re-enqueue skipped); how many deliveries in a row
    # never started. A job's attempt number is its token minus ``offset``
    # (lua/claim.lua, lua/recover.lua, lua/mark.lua).
    runs = Key()

    def claim_record(self, claimer: str) -> str:
        """STRING ``<nonce>|<id>\t<due_ms>\t<token>\n...``: what ``claimer``'s last claim
        leased (kept for a lease): a claim whose reply was lost is asked again under the
        same nonce and answered from it (lua/claim.lua), never claimed twice."""
        return self.tag + ":claimed:" + claimer

    def nack_record(self, holder: str) -> str:
        """HASH id -> ``<token> <result>``: what ``holder``'s nacks made of the jobs they
        settled (kept an hour, at most 1,000 jobs): a nack sent again after its reply was
        lost is answered from it, not refused as a lost lease (lua/nack.lua)."""
        return self.tag + ":nacked:" + holder


@dataclass(frozen=True, slots=True)
class CallableLimitKeys:
    """Key names of the limit of the callable ``path`` (its dotted path) under ``prefix``:
    all share ``{prefix:limit:path}``. Their suffixes differ from every ``QueueKeys``
    suffix, so a queue named ``limit:<path>`` never shares a key with the limit."""

    prefix: str
    path: str

    @property
    def tag(self) -> str:
        return "{%s:limit:%s}" % (self.prefix, self.path)

    # ZSET ``<job id>:<ms>`` -> grant ms: the grants of the rate limit's window.
    grants = Key()

    # ZSET job id -> slot deadline ms: the jobs holding a concurrency slot.
    running = Key()

    # STRING: the next retry time (ms) to hand to a refused job (spreading).
    next_free = Key()


@dataclass(frozen=True, slots=True)
class GlobalKeys:
    """Key names shared by every queue under ``prefix``: all share ``{prefix}``."""

    prefix: str

    @property
    def tag(self) -> str:
        return "{%s}" % self.prefix

    # ZSET worker id -> last heartbeat (Redis ms): the workers registry.
    workers = Key()

    # HASH worker id -> JSON the worker wrote about itself (host, pid, queues, ...).
    workers_info = Key("workers:info")

    # STREAM of every job transition of every queue (core/events.py).
    events = Key()
