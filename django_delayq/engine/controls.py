"""What operators and workers do to a queue as a whole: pause and resume it, purge its
waiting jobs, set its limits, and put jobs in flight back for later (``defer``).

* **Pause** is one key in the queue's slot (``QueueKeys.paused``): claim.lua claims
  nothing while it exists. Due times are kept; resuming deletes the key and PUBLISHes on
  the queue's wake channel so sleeping workers claim at once.
* **Purge** (purge.lua) removes waiting jobs (ready, then pending), never jobs in
  flight, in calls of at most ``scripts.MAX_PURGE``; callers loop until it returns [].
* **Queue limits** live in ``QueueKeys.limit`` (HASH rate, per_ms, concurrency) and are
  enforced inside claim.lua (lua/claim.lua's header).
* **Defer** (defer.lua): a job a callable limit refused goes back in line at a later
  time with its attempt given back.
* **Pause one group** (group_control.lua): claim.lua takes none of its jobs until it is
  resumed (docs/groups.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_delayq.engine import scripts
from django_delayq.engine.base import RedisOwner
from django_delayq.engine.outcomes import QueueLimit
from django_delayq.engine.replies import chunks


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
        return sorted(g.decode("utf-8", "replace") if isinstance(g, bytes) else g for g in found)

    def _group_control(self, queue: str, op: str, group: str) -> bool:
        k = self.keys(queue)
        keys = scripts.keys_of("group_control", k)
        return bool(int(self._run("group_control", keys, [op, group, k.channel])))

    def paused(self, queues: Sequence[str]) -> list[str]:
        """The paused ones among ``queues`` (one round trip)."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.exists(self.keys(queue).paused)
        return [queue for queue, found in zip(queues, pipe.execute()) if found]

    def purge_pending(self, queue: str, limit: int = scripts.MAX_PURGE) -> list[str]:
        """Remove up to ``limit`` (at most ``scripts.MAX_PURGE``) waiting jobs, never one
        in flight; returns their ids (bytes that are not UTF-8 replaced). Loop until []."""
        size = max(1, min(int(limit), scripts.MAX_PURGE))
        ids = self._run("purge", scripts.keys_of("purge", self.keys(queue)), [size])
        return [raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                for raw in ids]

    def set_queue_limit(self, queue: str, *, rate: tuple[int, int] | None,
                        concurrency: int | None) -> None:
        """Set (or, with None, lift) ``queue``'s limits: at most ``rate[0]`` claims in any
        window of ``rate[1]`` ms, at most ``concurrency`` jobs in flight. Workers write
        theirs at start-up; the last writer wins."""
        k = self.keys(queue)
        fields: dict[str, int] = {}
        if rate is not None:
            fields.update(rate=int(rate[0]), per_ms=int(rate[1]))
        if concurrency is not None:
            fields["concurrency"] = int(concurrency)
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(k.limit)
        if fields:
            pipe.hset(k.limit, mapping=fields)
        if rate is None:
            pipe.delete(k.starts)
        pipe.execute()

    def queue_limit(self, queue: str) -> QueueLimit | None:
        """``queue``'s limits, None when it has none."""
        raw = self.client.hgetall(self.keys(queue).limit)
        found = {(k.decode() if isinstance(k, bytes) else k): _int(v) for k, v in raw.items()}
        count, per_ms = found.get("rate"), found.get("per_ms")
        rate = (count, per_ms) if count and per_ms and count > 0 and per_ms > 0 else None
        concurrency = found.get("concurrency")
        if concurrency is not None and concurrency < 0:
            concurrency = None
        if rate is None and concurrency is None:
            return None
        return QueueLimit(rate=rate, concurrency=concurrency)

    def defer(self, queue: str, leases: Sequence[tuple[str, int, int]],
              now_ms: int | None = None) -> list[bool]:
        """Put jobs in flight, (id, token, at_ms), back in line due at ``at_ms`` with the
        attempt they were charged given back. False: the lease was lost, nothing done."""
        k = self.keys(queue)
        out: list[bool] = []
        for chunk in chunks(leases, scripts.MAX_DEFER):
            args: list[Any] = [self._now(now_ms), k.channel]
            for id_, token, at_ms in chunk:
                args += [id_, int(token), int(at_ms)]
            out += [bool(int(r)) for r in self._run("defer", scripts.keys_of("defer", k), args)]
        return out
