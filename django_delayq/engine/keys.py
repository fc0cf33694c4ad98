"""Every Redis key django-delayq uses, named here and nowhere else, with its Redis type.

``QueueKeys``: the keys of one queue, under one hash tag ``{prefix:queue}`` (one Redis
Cluster slot, so a script or MULTI may touch them all). ``GlobalKeys``: the keys shared
by every queue under a prefix (the workers registry, the event stream), under the hash
tag ``{prefix}``.

Each key is declared once, with its Redis type and (in the comment above it) what it
holds. The Lua scripts name the keys they use on their ``-- KEYS:`` line by these names
(``engine/scripts.py``); ``kinds()`` is the table their type checks are built from: each
script checks the type of every key it is given before its first write (lua/lib.lua
``wrong_type``), except the keys declared ``ANY`` (their comment says why).
"""

from __future__ import annotations

from dataclasses import dataclass

TYPES = ("string", "hash", "zset", "set", "stream")  # what Redis' TYPE answers
ANY = "any"  # a key whose type no script checks (its comment says why)


class Key:
    """A key name of the keys classes below: their ``tag``, then ``:<suffix>`` (the
    attribute's own name unless given); ``kind``, its Redis type (``TYPES``) or ``ANY``."""

    def __init__(self, kind: str, suffix: str = "") -> None:
        self.kind = kind
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

    # due_ms -> id: jobs not yet due, and due jobs waiting their turn to be promoted to
    # ``ready`` by claim.lua.
    pending = Key("zset")

    # lease_deadline_ms -> id: the leased jobs; one not settled or extended by its
    # deadline is taken back (recover.lua).
    inflight = Key("zset")

    # id -> envelope (JSON), only for jobs that carry one (absent: the payload is outside
    # Redis, e.g. in the audit row; claim.lua then answers "").
    jobs = Key("hash")

    # id -> deliveries so far: the lease token of the latest (claim.lua adds one).
    attempts = Key("hash")

    # ids whose cancel was asked while they ran: no retry (cancel.lua marks them).
    cancel = Key("set")

    # died_ms -> id: the dead jobs.
    dead = Key("zset")

    # When (and by whom) this queue's data was first written: ``<ms>:<token>:<kind>``
    # (enqueue.lua and reenqueue.lua create it when absent, ``<ms>:<us>:e``: "no epoch"
    # means "nothing written since empty"; the reconciler reads it to tell a data loss).
    epoch = Key("string")

    # id -> server ms: jobs a reconciler re-enqueued moments ago.
    reconciled = Key("zset")

    # ready score -> id: due jobs in claim order, priority first, then due time
    # (lua/lib.lua ``ready_score``). Every job in it is due no later than every job of
    # ``pending``.
    ready = Key("zset")

    # id -> priority, only for jobs whose priority is not 0 (pending, ready, in flight or
    # dead; absent: 0); forgotten with the job.
    prio = Key("hash")

    # id -> group, only for jobs of a group (``schedule(group=...)``), for as long as the
    # job lives (dead included); forgotten with the job (docs/groups.md). The queue is
    # grouped while it exists.
    group = Key("hash")

    # Every score 0: the index of ``ready``'s jobs by group while the queue is grouped,
    # member ``<group>\n<ready score, 16 digits><id>`` (lua/lib.lua ``group_index``;
    # ``ready`` stays the truth).
    group_ready = Key("zset")

    # group -> turn: the groups with indexed due jobs, in round-robin order (claim.lua
    # serves the lowest turn and moves it to the end).
    group_turns = Key("zset")

    # The paused groups of the queue (lua/group_control.lua); claim.lua takes none of
    # their jobs.
    group_paused = Key("set")

    # group -> ``<rate> <per_ms> <concurrency>``: the groups whose limits differ from the
    # queue's defaults (``limit``'s ``group_*`` fields), -1 where a group keeps the
    # default. A setting, like ``limit``: the database holds it too (GroupLimit).
    group_limits = Key("hash")

    # Every score 0: the grouped jobs in flight, member ``<group>\n<id>``; a group's count
    # is one ZLEXCOUNT (its concurrency). Written by claim.lua, emptied by every script
    # that takes a job out of ``inflight`` (lua/lib.lua ``group_slots``).
    group_running = Key("zset")

    # Every score 0: the claims of the rate-limited groups, member
    # ``<group>\n<claim ms, 16 digits><id>:<token>``; a group's count in its window is one
    # ZLEXCOUNT.
    group_starts = Key("zset")

    # ms -> member of ``group_starts``: when each start leaves its group's window
    # (claim.lua drops the expired ones from both, at most 100 a call).
    group_expiry = Key("zset")

    # group -> ms: the groups a limit took out of the rotation, and when a claim looks at
    # them again (a settle of one of their jobs puts them back sooner).
    group_held = Key("zset")

    # due_ms -> id: an index of the jobs of ``pending`` whose priority is above 0, so
    # claim.lua promotes their due ones ahead of a backlog due before them (the job stays
    # in ``pending`` too; an entry whose job left pending is dropped when read).
    urgent = Key("zset")

    # Present while the queue is paused (a STRING, value: when, Redis ms): claim.lua
    # claims and promotes nothing. Not type-checked (ANY): claim.lua only asks whether it
    # exists (EXISTS), and the engine writes it with SET NX and removes it with DEL:
    # whatever its type, nothing fails, and a key of another type there pauses the queue.
    paused = Key(ANY)

    # id -> server ms: cancels whose row decided (cancel.lua found the job nowhere in
    # Redis: its send not landed yet, inside the canceller's open transaction). A job of
    # it that arrives (enqueue.lua, reenqueue.lua) waits in pending until that ms (lib.lua
    # ``hold_back``), and the cancel sent after the canceller's commit removes job and hold
    # together.
    hold = Key("zset")

    # The queue's limits: ``rate`` and ``per_ms`` (claims per window), ``concurrency``
    # (jobs in flight at once); ``group_rate``, ``group_per_ms``, ``group_concurrency``:
    # each group's defaults. Absent: no limit.
    limit = Key("hash")

    # ``<id>:<token>:<ms>`` -> claim ms: the claims of the rate limit's window.
    starts = Key("zset")

    # id -> server ms: jobs this Redis settled (acked, or cancelled while they ran) for a
    # worker whose audit row has not landed yet. The worker forgets the entry once the
    # row is written; until then the reconciler reads it instead of taking the job for
    # lost (a stalled database, a worker killed before its flush).
    settled = Key("zset")

    # id -> ``<code> <attempt> <holder> <token>``: how ``settled`` ended the job (``s``
    # succeeded, ``x`` expired, ``c`` cancelled), in which attempt, by which worker (its
    # registry id), under which lease token (``outbox.Settled``).
    settled_by = Key("hash")

    # The highest shard count the queue's data was written with (only for a queue ever
    # sharded: on shard 0, and the same value on each other shard; engine/shard_map.py).
    shards = Key("string")

    # The event stream of the jobs of one shard of a sharded queue, on the shard's node
    # (engine/event_log.py); other queues' events are in ``GlobalKeys``'.
    events = Key("stream")

    @property
    def channel(self) -> str:
        """The Pub/Sub channel told the new earliest due time of the queue (a channel, not
        a key: scripts get it in ``ARGV``)."""
        return self.tag + ":wake"

    def all(self) -> tuple[str, ...]:
        """The keys holding jobs (not the queue's settings: paused, limit, starts,
        group_limits)."""
        return (self.pending, self.inflight, self.jobs, self.attempts, self.cancel, self.dead,
                self.ready, self.prio, self.urgent, self.settled, self.settled_by, self.runs,
                self.group, self.group_ready, self.group_turns, self.group_running,
                self.group_starts, self.group_expiry, self.group_held)

    # id -> ``<token> <offset> <streak>``: the last delivery (lease token) whose run
    # started, marked by its worker before the function is called; how far the
    # job's tokens run ahead of its attempts (deliveries that never started: their
    # worker died first; numbers a re-enqueue skipped); how many deliveries in a row
    # never started. A job's attempt number is its token minus ``offset``
    # (lua/claim.lua, lua/recover.lua, lua/mark.lua).
    runs = Key("hash")

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

    # ``<job id>:<ms>`` -> grant ms: the grants of the rate limit's window.
    grants = Key("zset")

    # job id -> slot deadline ms: the jobs holding a concurrency slot (until
    # release_callable.lua frees it, or its deadline passes).
    running = Key("zset")

    # The next retry time (ms) to hand to a refused job (spreading).
    next_free = Key("string")

    # How many starts its concurrency refused since the last grant: the back-off of the
    # next refused job (acquire.lua).
    refusals = Key("string")


@dataclass(frozen=True, slots=True)
class GlobalKeys:
    """Key names shared by every queue under ``prefix``: all share ``{prefix}``."""

    prefix: str

    @property
    def tag(self) -> str:
        return "{%s}" % self.prefix

    # worker id -> last heartbeat (Redis ms): the workers registry.
    workers = Key("zset")

    # worker id -> JSON the worker wrote about itself (host, pid, queues, ...).
    workers_info = Key("hash", "workers:info")

    # Every job transition of every queue (core/events.py).
    events = Key("stream")


# The keys a script is given by name (``scripts.Script.keys_of(k, record=...)``), each
# caller's own: ``QueueKeys.claim_record`` and ``QueueKeys.nack_record``.
BY_NAME = {"record": "string", "nacked": "hash"}


def kinds() -> dict[str, str]:
    """Each key name a script may declare -> its Redis type (``TYPES``, or ``ANY``): the
    keys of ``QueueKeys`` and ``CallableLimitKeys``, then ``BY_NAME``."""
    found = {name: key.kind for cls in (QueueKeys, CallableLimitKeys)
             for name, key in vars(cls).items() if isinstance(key, Key)}
    return found | BY_NAME
