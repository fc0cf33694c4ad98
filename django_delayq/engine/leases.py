"""Reads and writes about the leases of running jobs that need no script: the start
marks (the runs entries: lua/recover.lua charges an attempt only for a delivery whose run
started) and the leases about to expire."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django_delayq.engine import scripts
from django_delayq.engine.base import RedisOwner
from django_delayq.engine.replies import bad_id
from django_delayq.engine.replies import shown as _shown
from django_delayq.engine.replies import text as _s
from django_delayq.engine.scripts import MAX_MARK

if TYPE_CHECKING:
    from django_delayq.engine.outcomes import ClaimedJob

logger = logging.getLogger(__name__)


class Leases(RedisOwner):
    _mark_keys: dict[str, tuple[str, str]]  # data set -> mark.lua's KEYS (Engine sets it)

    def start_mark(self, job: ClaimedJob) -> tuple[tuple[str, str], list[str]]:
        """(KEYS, ARGV) of lua/mark.lua marking ``job``'s run started."""
        name = job.home or job.queue
        keys = self._mark_keys.get(name)  # a job thread's path: built once per data set
        if keys is None:
            attempts, runs = scripts.keys_of("mark", self.keys(name))
            keys = self._mark_keys[name] = (attempts, runs)
        return keys, [job.id, str(job.token), str(job.token - job.attempt)]

    def mark_started(self, jobs: Sequence[ClaimedJob]) -> int:
        """Mark the runs of ``jobs`` started, before their functions are called: a lease
        of theirs taken back by recovery then counts as an attempt (lua/recover.lua).
        Returns how many were still held (marked)."""
        calls: dict[tuple[str, str], list[str]] = {}
        for job in jobs:
            keys, args = self.start_mark(job)
            calls.setdefault(keys, []).extend(args)
        done = 0
        for keys, args in calls.items():
            for i in range(0, len(args), 3 * MAX_MARK):
                done += int(self._run("mark", keys, args[i:i + 3 * MAX_MARK]))
        return done

    def expiring(self, queue: str, within_ms: int, limit: int = 100) -> list[str]:
        """Ids whose lease ends within ``within_ms`` of the local clock (or has ended):
        the candidates of the next ``recover``, for looking up their ``max_attempts``.
        Ids that are not valid job ids are left out (``recover`` sets them aside)."""
        horizon = int(time.time() * 1000) + within_ms
        ids = self.client.zrangebyscore(self.keys(queue).inflight, "-inf", horizon, 0, limit)
        out = []
        for raw in ids:
            try:
                job_id = _s(raw)
            except UnicodeDecodeError:
                job_id = ""
            if job_id and bad_id(job_id) is None:
                out.append(job_id)
            else:
                logger.debug("queue %r: lease of a poison id %s left to recover", queue,
                             _shown(raw))
        return out
