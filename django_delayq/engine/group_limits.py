"""Callable ("group") limits: how many calls of one function start per window, and how
many run at once, across every worker. Checked when a job starts (the worker acquires
the group right before the call) by acquire.lua, freed by release_group.lua after the
attempt is settled; the keys of a group share the hash tag ``{prefix:limit:<group>}``
(``keys.GroupKeys``; group = the callable's dotted path).

``GRANT_MARGIN_MS`` widens the rate window by the delay allowed between a grant and the
call it allows (acquire.lua's header): if the call starts within that margin, at most N
calls start in any window of ``per_ms``. ``SPREAD_MS`` spaces the retry times of jobs
refused for concurrency (when a slot frees is unknown).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_delayq.engine import scripts
from django_delayq.engine.base import RedisOwner
from django_delayq.engine.keys import GroupKeys
from django_delayq.engine.outcomes import Grant, LimitState
from django_delayq.engine.replies import chunks

GRANT_MARGIN_MS = 50
SPREAD_MS = 50


class GroupLimits(RedisOwner):
    def group_keys(self, group: str) -> GroupKeys:
        """The key names of the callable limit ``group``."""
        return GroupKeys(self.prefix, group)

    def acquire(self, group: str, job_id: str, *, lease_ms: int,
                rate: tuple[int, int] | None, concurrency: int | None,
                margin_ms: int = GRANT_MARGIN_MS, spread_ms: int = SPREAD_MS,
                now_ms: int | None = None) -> Grant:
        """May ``job_id`` start now under ``group``'s limits? Granted: it holds a
        concurrency slot for ``lease_ms`` unless released first (``release_group``).
        Refused: ``retry_at_ms``, spread so that refused jobs come back one by one.
        With a concurrency limit, a job that holds its slot already is granted again
        with its deadline renewed and nothing counted twice: a long call's heartbeat."""
        count, per_ms = rate if rate is not None else (-1, 0)
        args: list[Any] = [self._now(now_ms), job_id, int(lease_ms), int(count), int(per_ms),
                           -1 if concurrency is None else int(concurrency), int(margin_ms),
                           int(spread_ms)]
        reply = self._run("acquire", scripts.keys_of("acquire", self.group_keys(group)), args)
        granted = bool(int(reply[0]))
        return Grant(granted=granted, retry_at_ms=None if granted else int(reply[1]))

    def release_group(self, group: str, job_ids: Sequence[str]) -> int:
        """Free the concurrency slots of ``job_ids`` (their attempts are settled); returns
        how many were held."""
        keys = scripts.keys_of("release_group", self.group_keys(group))
        return sum(int(self._run("release_group", keys, list(chunk)))
                   for chunk in chunks(job_ids, scripts.MAX_RELEASE_GROUP))

    def limit_state(self, group: str, *, rate: tuple[int, int] | None,
                    concurrency: int | None) -> LimitState:
        """Grants of ``group`` in the last ``rate[1]`` ms and slots held now (Redis
        clock); ``concurrency`` is not needed to count, taken for symmetry."""
        k = self.group_keys(group)
        now_ms = self.time_ms()
        pipe = self.client.pipeline(transaction=False)
        pipe.zcount(k.grants, "(%d" % (now_ms - rate[1]) if rate else "+inf", "+inf")
        pipe.zcount(k.running, "(%d" % now_ms, "+inf")
        started, running = pipe.execute()
        return LimitState(started_in_window=int(started) if rate else 0, running=int(running))
