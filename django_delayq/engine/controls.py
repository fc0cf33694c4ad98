"""What operators and workers do to a queue as a whole: pause and resume it, purge its
waiting jobs, set its limits (``Engine.defer``, next to ``release``, puts jobs in flight
back for later).

* **Pause** is one key in the queue's slot (``QueueKeys.paused``): claim.lua claims
  nothing while it exists. Due times are kept; resuming deletes the key and PUBLISHes on
  the queue's wake channel so sleeping workers claim at once.
* **Purge** (purge.lua) removes waiting jobs (ready, then pending), never jobs in
  flight, in calls of at most ``scripts.MAX_PURGE``; callers loop until it returns [].
* **Queue limits** live in ``QueueKeys.limit`` (HASH rate, per_ms, concurrency) and are
  enforced inside claim.lua (lua/claim.lua's header).
* **Defer** (give_back.lua, ``Engine.defer``): a job a callable limit refused goes back in
  line at a later time with its attempt given back.
* **Pause one group** (group_control.lua): claim.lua takes none of its jobs until it is
  resumed (docs/groups.md).
* **Group limits**: every group's defaults are fields of ``QueueKeys.limit``
  (``group_rate``, ``group_per_ms``, ``group_concurrency``), one group's override a field
  of ``QueueKeys.group_limits`` (group_control.lua), both enforced inside claim.lua
  (lua/lib.lua's ``group_limits`` and ``group_slots``).
* **Callable limits**: how many calls of one function start per window, and how many
  run at once, across every worker. Checked when a job starts (the worker acquires a
  grant right before the call) by acquire.lua, freed by release_callable.lua after the
  attempt is settled; the keys of a callable's limit share the hash tag
  ``{prefix:limit:<path>}`` (``keys.CallableLimitKeys``; path = the callable's dotted
  path). ``GRANT_MARGIN_MS`` widens the rate window by the delay allowed between a grant
  and the call it allows (acquire.lua's header): if the call starts within that margin,
  at most N calls start in any window of ``per_ms``. ``SPREAD_MS`` spaces the retry
  times of jobs refused for concurrency (when a slot frees is unknown), each refusal
  since the last grant waiting twice as long, at most ``MOST_WAIT_MS``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from django_delayq.engine import scripts
from django_delayq.engine.base import RedisOwner
from django_delayq.engine.keys import CallableLimitKeys
from django_delayq.engine.outcomes import Grant, LimitState, QueueLimit
from django_delayq.engine.replies import chunks, envelope_text
from django_delayq.engine.shard_health import UNREACHABLE

INHERIT = -1  # an override's field that keeps the queue's default (lib.lua group_limits)
GRANT_MARGIN_MS = 50
SPREAD_MS = 50
MOST_WAIT_MS = 1000


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class QueueControls(RedisOwner):
    def pause(self, queue: str) -> bool:
        """Stop claims of ``queue`` (jobs in flight go on). True when it was running."""
        return bool(self.client.set(self.keys(queue).paused, self.time_ms(), nx=True))

    def resume(self, queue: str) -> bool:
        """Let ``queue`` be claimed again and wake its workers. True when it was paused."""
        k = self.keys(queue)
        if not self.client.delete(k.paused):
            return False
        self.client.publish(k.channel, self.time_ms())
        return True

    def pause_group(self, queue: str, group: str) -> bool:
        """Claim none of ``group``'s jobs of ``queue``. True when it was not paused."""
        return self._group_control(queue, "pause", group)

    def resume_group(self, queue: str, group: str) -> bool:
        """Claim ``group``'s jobs again (its workers told at once when it has due jobs).
        True when it was paused."""
        return self._group_control(queue, "resume", group)

    def paused_groups(self, queue: str) -> list[str]:
        """The paused groups of ``queue``, sorted."""
        found = self.client.smembers(self.keys(queue).group_paused)
        return sorted(envelope_text(g) for g in found)

    def _group_control(self, queue: str, op: str, group: str, value: str = "") -> bool:
        name = group.encode("utf-8", "surrogateescape")  # a name read from Redis as it was
        return bool(int(self._script("group_control", queue,
                                     [op, name, self.keys(queue).channel, value])))

    def set_group_limit(self, queue: str, group: str, *, rate: tuple[int, int] | None,
                        concurrency: int | None) -> bool:
        """Override the queue's group defaults for ``group`` (None: that field keeps the
        default); a group a limit held back is weighed again at once. True when changed."""
        return self._group_control(queue, "limit", group, override_value(rate, concurrency))

    def clear_group_limit(self, queue: str, group: str) -> bool:
        """``group`` back to the queue's defaults. True when it had an override."""
        return self._group_control(queue, "unlimit", group)

    def group_limit_overrides(self, queue: str) -> dict[str, str]:
        """group -> its override as Redis holds it (``override_value``'s form); a name
        that is not UTF-8 (no group's: written by hand) keeps its bytes as surrogates, so
        ``sync_group_limits`` can remove it."""
        return {_name(g): envelope_text(v) for g, v in
                self.client.hscan_iter(self.keys(queue).group_limits, count=500)}

    def sync_group_limits(self, queue: str, wanted: dict[str, str], have: dict[str, str]
                          ) -> int:
        """Make Redis's overrides ``wanted`` (group -> ``override_value``), where ``have``
        (``group_limit_overrides``, read before ``wanted``) differs: written or removed
        (the reconciler, from the rows); how many changed."""
        changed = 0
        for group in sorted(set(have) | set(wanted)):
            if have.get(group) != wanted.get(group):
                changed += 1
                self._group_control(queue, "limit" if group in wanted else "unlimit", group,
                                    wanted.get(group, ""))
        return changed

    def group_slots(self, queue: str) -> dict[str, int]:
        """group -> its jobs in flight as the group limits count them (``group_running``;
        a read of the whole set: for status and tests)."""
        members = self.client.zscan_iter(self.keys(queue).group_running, count=1000)
        return dict(Counter(envelope_text(member).partition("\n")[0] for member, _ in members))

    def held_groups(self, queue: str, among: Sequence[str] | None = None,
                    now_ms: int | None = None) -> dict[str, int]:
        """group -> server ms a claim looks at it again: the groups a limit holds back now
        (all of them, or those of ``among``: one read), on the Redis clock (``now_ms``:
        given). Only a claim takes a group out of ``group_held`` when its time comes: a
        mark whose time has passed (a paused or idle queue) still counts while the group's
        jobs in flight fill its concurrency (a concurrency hold, ``now + lease``, ends
        when a slot frees, and every way out of flight takes the mark away), not after
        (a rate hold ends at its time)."""
        key = self.keys(queue).group_held
        if among is not None:
            found = self.client.zmscore(key, list(among)) if among else []
            marks = {g: int(ms) for g, ms in zip(among, found) if ms is not None}
        else:
            marks = {envelope_text(g): int(ms)
                     for g, ms in self.client.zrange(key, 0, -1, withscores=True)}
        if not marks:
            return {}
        now = self.time_ms() if now_ms is None else int(now_ms)
        passed = [g for g, ms in marks.items() if ms <= now]
        full = self._at_concurrency(queue, passed) if passed else set()
        return {g: ms for g, ms in marks.items() if ms > now or g in full}

    def _at_concurrency(self, queue: str, groups: list[str]) -> set[str]:
        """Those of ``groups`` whose jobs in flight (``group_running``) reach their
        concurrency: the override's, else the queue's default (as lib.lua's
        ``round_limits``); one round trip."""
        k = self.keys(queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(k.limit, "group_concurrency")
        pipe.hmget(k.group_limits, groups)
        for g in groups:  # lib.lua's group_range
            pipe.zlexcount(k.group_running, "[%s\n" % g, "(%s\x0b" % g)
        default, overrides, *running = pipe.execute()
        full = set()
        for g, override, n in zip(groups, overrides, running):
            fields = envelope_text(override).split() if override is not None else []
            own = _int(fields[2]) if len(fields) == 3 else None
            limit = own if own is not None and own >= 0 else _int(default)
            if limit is not None and limit >= 1 and int(n) >= limit:  # lib.lua's whole()
                full.add(g)
        return full

    def paused(self, queues: Sequence[str]) -> list[str]:
        """The paused ones among ``queues`` (one round trip)."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.exists(self.keys(queue).paused)
        return [queue for queue, found in zip(queues, pipe.execute()) if found]

    def pause_counts(self, queues: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Per queue: (its data sets paused, its data sets that answered): one each here
        (a sharded queue has one per shard: ``ShardedEngine``)."""
        found = set(self.paused(queues))
        return {queue: (int(queue in found), 1) for queue in queues}

    def unanswered(self, data_sets: Sequence[str]) -> dict[str, str]:
        """Those of ``data_sets`` (a queue's shards: ``data_sets(queue)``) whose node does
        not answer now, each with its error: a read of its pause flag each, on its node."""
        out = {}
        for name in data_sets:
            try:
                self.client.exists(self.keys(name).paused)
            except UNREACHABLE as exc:
                out[name] = str(exc) or type(exc).__name__
        return out

    def purge_pending(self, queue: str, limit: int = scripts.MAX_PURGE) -> list[str]:
        """Remove up to ``limit`` (at most ``scripts.MAX_PURGE``) waiting jobs, never one
        in flight; returns their ids (bytes that are not UTF-8 replaced). Loop until []."""
        size = max(1, min(int(limit), scripts.MAX_PURGE))
        return [envelope_text(raw) for raw in self._script("purge", queue, [size])]

    def set_queue_limit(self, queue: str, *, rate: tuple[int, int] | None,
                        concurrency: int | None, groups: QueueLimit | None = None) -> None:
        """Set (or, with None, lift) ``queue``'s limits: at most ``rate[0]`` claims in any
        window of ``rate[1]`` ms, at most ``concurrency`` jobs in flight; ``groups``: the
        same for each group of the queue (its defaults). Workers write theirs at start-up;
        the last writer wins."""
        k = self.keys(queue)
        fields = _limit_fields(rate, concurrency, groups)
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(k.limit)
        if fields:
            pipe.hset(k.limit, mapping=fields)
        if rate is None:
            pipe.delete(k.starts)
        pipe.execute()

    def restore_queue_limit(self, queue: str, *, rate: tuple[int, int] | None,
                            concurrency: int | None, groups: QueueLimit | None = None) -> bool:
        """Write the limits as ``set_queue_limit`` does when Redis holds none for
        ``queue`` (its data was lost); True when it wrote them."""
        fields = _limit_fields(rate, concurrency, groups)
        k = self.keys(queue)
        if not fields or self.client.exists(k.limit):
            return False
        self.client.hset(k.limit, mapping=fields)
        return True

    def queue_limit(self, queue: str) -> QueueLimit | None:
        """``queue``'s limits, None when it has none."""
        count, per_ms, concurrency = (_int(v) for v in self.client.hmget(
            self.keys(queue).limit, "rate", "per_ms", "concurrency"))
        rate = (count, per_ms) if count and per_ms and count > 0 and per_ms > 0 else None
        if concurrency is not None and concurrency < 0:
            concurrency = None
        if rate is None and concurrency is None:
            return None
        return QueueLimit(rate=rate, concurrency=concurrency)

    # -- callable limits ------------------------------------------------------------

    def callable_keys(self, path: str) -> CallableLimitKeys:
        """The key names of the limit of the callable ``path``."""
        return CallableLimitKeys(self.prefix, path)

    def acquire(self, path: str, job_id: str, *, lease_ms: int,
                rate: tuple[int, int] | None, concurrency: int | None,
                margin_ms: int = GRANT_MARGIN_MS, spread_ms: int = SPREAD_MS,
                most_wait_ms: int = MOST_WAIT_MS, now_ms: int | None = None) -> Grant:
        """May ``job_id`` start now under the limits of ``path``? Granted: it holds a
        concurrency slot for ``lease_ms`` unless released first (``release_callable``).
        Refused: ``retry_at_ms``, spread so that refused jobs come back one by one (for
        concurrency, backing off up to ``most_wait_ms`` while no start is granted).
        With a concurrency limit, a job that holds its slot already is granted again
        with its deadline renewed and nothing counted twice: a long call's heartbeat."""
        count, per_ms = rate if rate is not None else (-1, 0)
        args: list[Any] = [self._now(now_ms), job_id, int(lease_ms), int(count), int(per_ms),
                           -1 if concurrency is None else int(concurrency), int(margin_ms),
                           int(spread_ms), int(most_wait_ms)]
        reply = self._run("acquire", scripts.keys_of("acquire", self.callable_keys(path)), args)
        granted = bool(int(reply[0]))
        return Grant(granted=granted, retry_at_ms=None if granted else int(reply[1]))

    def release_callable(self, path: str, job_ids: Sequence[str]) -> int:
        """Free the concurrency slots of ``job_ids`` (their attempts are settled); returns
        how many were held."""
        keys = scripts.keys_of("release_callable", self.callable_keys(path))
        return sum(int(self._run("release_callable", keys, list(chunk)))
                   for chunk in chunks(job_ids, scripts.MAX_RELEASE_CALLABLE))

    def limit_state(self, path: str, *, rate: tuple[int, int] | None,
                    concurrency: int | None) -> LimitState:
        """Grants of ``path`` in the last ``rate[1]`` ms and slots held now (Redis
        clock); ``concurrency`` is not needed to count, taken for symmetry."""
        k = self.callable_keys(path)
        now_ms = self.time_ms()
        pipe = self.client.pipeline(transaction=False)
        pipe.zcount(k.grants, "(%d" % (now_ms - rate[1]) if rate else "+inf", "+inf")
        pipe.zcount(k.running, "(%d" % now_ms, "+inf")
        started, running = pipe.execute()
        return LimitState(started_in_window=int(started) if rate else 0, running=int(running))


def override_value(rate: tuple[int, int] | None, concurrency: int | None) -> str:
    """A group's override as ``group_limits`` holds it: ``<rate> <per_ms> <concurrency>``,
    ``INHERIT`` for a field left to the queue's default."""
    count, per_ms = rate if rate is not None else (INHERIT, INHERIT)
    return "%d %d %d" % (count, per_ms, INHERIT if concurrency is None else concurrency)


def _limit_fields(rate: tuple[int, int] | None, concurrency: int | None,
                  groups: QueueLimit | None) -> dict[str, int]:
    fields: dict[str, int] = {}
    if rate is not None:
        fields.update(rate=int(rate[0]), per_ms=int(rate[1]))
    if concurrency is not None:
        fields["concurrency"] = int(concurrency)
    if groups is not None and groups.rate is not None:
        fields.update(group_rate=int(groups.rate[0]), group_per_ms=int(groups.rate[1]))
    if groups is not None and groups.concurrency is not None:
        fields["group_concurrency"] = int(groups.concurrency)
    return fields


def _name(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
