"""Callable limits: how many calls of one function start per window, and how
many run at once, across every worker. Checked when a job starts (the worker acquires
a grant right before the call) by acquire.lua, freed by release_callable.lua after the
attempt is settled; the keys of a callable's limit share the hash tag ``{prefix:limit:<path>}``
(``keys.CallableLimitKeys``; path = the callable's dotted path).

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
from django_delayq.engine.keys import CallableLimitKeys
from django_delayq.engine.outcomes import Grant, LimitState
from django_delayq.engine.replies import chunks

GRANT_MARGIN_MS = 50
SPREAD_MS = 50


class CallableLimits(RedisOwner):
    def callable_keys(self, path: str) -> CallableLimitKeys:
        """The key names of the limit of the callable ``path``."""
        return CallableLimitKeys(self.prefix, path)

    def acquire(self, path: str, job_id: str, *, lease_ms: int,
                rate: tuple[int, int] | None, concurrency: int | None,
                margin_ms: int = GRANT_MARGIN_MS, spread_ms: int = SPREAD_MS,
                now_ms: int | None = None) -> Grant:
        """May ``job_id`` start now under the limits of ``path``? Granted: it holds a
        concurrency slot for ``lease_ms`` unless released first (``release_callable``).
        Refused: ``retry_at_ms``, spread so that refused jobs come back one by one.
        With a concurrency limit, a job that holds its slot already is granted again
        with its deadline renewed and nothing counted twice: a long call's heartbeat."""
        count, per_ms = rate if rate is not None else (-1, 0)
        args: list[Any] = [self._now(now_ms), job_id, int(lease_ms), int(count), int(per_ms),
                           -1 if concurrency is None else int(concurrency), int(margin_ms),
                           int(spread_ms)]
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
