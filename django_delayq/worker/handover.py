"""Claimed jobs on their way to the worker's threads.

A claim returns ids; ``Handover.take`` reads their payloads from their audit rows
(``payloads.read``: Redis supplies ids, never code or arguments), ends a live row with an
unusable payload dead, ends a job whose cancel was asked ``cancelled``, sets aside a job
with no row or a final one, and puts the jobs that may run in the local queue, ordered by
priority, then claim order (a cancel asked while a job waits there is read before a
thread takes it: ``held_cancels.py``). Claims and their hand-overs hold one lock
(``lock``), so claim order is the order Redis gave: due order among ungrouped jobs of one
priority, the groups' turns among grouped ones (a heavy group's older jobs claimed later
never jump ahead of the light groups' turns), also when the main loop and the urgent
timer claim on two threads.

``lock`` is held across a claim and its hand-over, and across a decision that nothing is
held (drain, burst end): a claim on one thread cannot put jobs in the local queue after
another thread decided the worker is done with it.

Claimed jobs that must not run (no audit row, or a final one) leave Redis's in-flight set
here (``set_aside``), each with a warning and a count (``payloads.read`` decides which;
this module acts on it, a layer above, where the metrics live).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import queue as queue_mod
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from django_delayq.core import payloads
from django_delayq.core.payloads import NO_ROW, Aside
from django_delayq.engine.logtext import shown, text
from django_delayq.engine.outcomes import ClaimedJob
from django_delayq.observe import counters
from django_delayq.worker import outcome

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.worker.ledger import Ledger

logger = logging.getLogger(__name__)

LAST = 1 << 30  # the rank of the threads' stop marker: after every claimed job

# (-priority or LAST, claim order, job)
Ranked = tuple[int, int, ClaimedJob | None]


def _spent(job: ClaimedJob) -> outcome.Outcome:
    """The dead outcome of a job whose last attempt (``job.attempt`` - 1, its row's
    count) ran and was lost with its worker before the start mark reached Redis: it does
    not run again, as ``recover.lua`` would have decided with the mark (that attempt's
    ``JobAttempt`` says so)."""
    last = dataclasses.replace(job, attempt=job.attempt - 1)
    path = job.payload.path if job.payload else ""
    return outcome.not_run(last, outcome.Kind.DEAD, text(path, 255),
                           error_type=outcome.LEASE_LOST, error=outcome.LOST_LEASE)


class Handover:
    def __init__(self, engine: Engine, settings: Settings, ledger: Ledger) -> None:
        self.engine, self.settings, self.ledger = engine, settings, ledger
        self.local: queue_mod.PriorityQueue[Ranked] = queue_mod.PriorityQueue()
        self.lock = threading.RLock()
        self._order = itertools.count()
        self.claimed_total = 0  # jobs handed to the threads (under ``lock``)
        self.set_aside = 0  # claimed jobs not run: no row, or a final one

    def take(self, queue: str, claimed: list[ClaimedJob]) -> None:
        """Hand a claim's jobs to the threads (call it holding ``lock``). When the rows
        cannot be read, the jobs go back to Redis (no attempt charged) and the error is
        raised: the caller's loop backs off."""
        for job in self._loaded(queue, claimed) if claimed else []:
            priority = job.payload.priority if job.payload else 0
            self.local.put((-priority, next(self._order), job))
            self.claimed_total += 1

    def stop_threads(self, n: int) -> None:
        for _ in range(n):
            self.local.put((LAST, next(self._order), None))

    def next_job(self) -> ClaimedJob | None:
        """The next job for a thread (blocks); None: the thread stops."""
        return self.local.get()[2]

    def _loaded(self, queue: str, jobs: list[ClaimedJob]) -> list[ClaimedJob]:
        read_at = time.monotonic()  # sent after this: a cancel asked later is read again
        try:  # before a thread takes a job held longer (held_cancels.py)
            loaded = payloads.read(jobs, claimed=True)
        except Exception:
            self.engine.release(queue, jobs)
            raise
        for bad in loaded.broken:
            logger.warning("job %s: %s; it ends dead without running", shown(bad.job.id),
                           shown(bad.reason, 2000))
        ended = ([outcome.unusable(bad.job, bad.path, bad.reason) for bad in loaded.broken]
                 + [outcome.cancelled_unstarted(job) for job in loaded.cancelled])
        self.set_aside += len(loaded.aside)
        try:
            set_aside(self.engine, queue, loaded.aside, self.settings.dead_max)
        except RedisError as exc:  # their leases expire; the next claim sets them aside again
            logger.warning("could not set aside %d job(s): %s", len(loaded.aside), shown(exc))
        run: list[ClaimedJob] = []
        counted = {job.id: job.attempt for job in jobs}  # as Redis counted them
        for job in loaded.run:  # raised to its row's count + 1 (payloads._counted) past its
            limit = (job.payload.max_attempts if job.payload else None) \
                or self.settings.default_max_attempts  # limit: only then it does not run
            if counted[job.id] < job.attempt > limit:  # its last attempt ran, its start mark
                ended.append(_spent(job))  # lost with its worker: it ends dead
            else:
                run.append(job)
        self.ledger.claimed(run, ended, read_at)
        return run


def set_aside(engine: Engine, queue: str, items: Sequence[Aside], dead_max: int) -> None:
    """Take jobs that must not run out of Redis's in-flight set, with a warning each: a job
    without a row goes to the dead set; one whose row is final, or belongs to another queue
    (a copy of its id in this queue's keys), is forgotten here (ack: this queue's keys
    only, so a job waiting in its own queue stays there). The row is never touched.
    ``RedisError`` propagates (the leases then expire and the next claim sets them aside
    again)."""
    if not items:
        return
    engine.nack(queue, [(a.job.id, a.job.token, None) for a in items if a.kind == NO_ROW],
                dead_max=dead_max)
    engine.ack(queue, [(a.job.id, a.job.token) for a in items if a.kind != NO_ROW])
    for a in items:
        logger.warning("job %s (queue %r) set aside, not run: %s", shown(a.job.id), queue,
                       shown(a.reason))
        counters.count_set_aside(queue, a.kind)
