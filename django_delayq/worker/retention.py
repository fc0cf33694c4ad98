"""Retention: the workers delete old finished rows, and forget workers that died.

``DELAYQ["RETENTION"]`` says how many days a row is kept after its job ended, per final
status (``succeeded``, ``cancelled``, ``expired``, ``dead``; None keeps them forever, and
``RETENTION = None`` keeps every row). Failed attempts of a job that is still live
(``retrying``) are never deleted: each ``JobAttempt`` row goes with its job.

The keeper thread of each worker calls ``Retention.tick`` between heartbeats. Every
``INTERVAL_S`` (the first time ``INTERVAL_S`` after start; then every ``BACKLOG_PAUSE_S``
while batches come back full), the one worker with the smallest id among those heard
from within two leases does a round:

- it forgets the workers whose last heartbeat is older than ``forget_after_ms`` (killed
  without removing themselves from the registry), and deletes their clean stops
  (``core/worker_stops.py``) and any clean stop older than that;
- per status, it deletes at most ``BATCH`` rows, with their ``JobAttempt`` rows and
  their ``JobDependency`` edges (as parent and as child), in one transaction
  (``delete_jobs``, which ``delayq_prune`` uses too). An edge still open whose parent is
  deleted is resolved first, in that transaction (its waiting child is released or
  cancelled as ``workflows.sweep`` would have done): once the parent's row is gone no
  sweep could find it, and the child would wait forever. A row goes once both its end
  (``finished_at``) and its due time (``run_at``) are older than its status's
  retention: the due time keeps the query on the ``(status, run_at)`` index, and only
  delays a row whose job was cancelled or expired before it was due.

A worker that stopped without its audit flush (the database was down) stays registered,
silent, as a crashed worker would: the reconcilers treat it as dead. How long a dead
worker stays listed: ``forget_after_ms``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import router, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from django_delayq.core import worker_stops, workflows
from django_delayq.engine.logtext import shown
from django_delayq.models import FINAL_STATUSES, Job, JobAttempt, JobDependency, JobKey
from django_delayq.worker.audit import OutageLog

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine

logger = logging.getLogger(__name__)

BATCH = 500  # rows deleted per transaction
INTERVAL_S = 20.0  # between deletion rounds once caught up
BACKLOG_PAUSE_S = 1.0  # between batches while older rows remain
FORGET_AFTER_LEASES = 3  # a worker silent this many leases (plus a reconcile round) is gone


def forget_after_ms(settings: Settings) -> int:
    """How long a worker may be silent before the registry forgets it: several leases
    (its leases have long expired and been taken back) plus the reconciler's grace and
    interval, so a reconciler waiting to learn whether that worker died still sees its
    last beat (``core.reconcile_state.Liveness``)."""
    return int(FORGET_AFTER_LEASES * settings.lease_ms + 1000 * (
        settings.reconcile_grace_seconds + settings.reconcile_interval_seconds))


def delete_batch(status: str, days: float, limit: int = BATCH) -> tuple[int, int]:
    """Delete up to ``limit`` ``status`` rows that ended over ``days`` ago, with their
    attempt rows and edges; returns (jobs, attempts) deleted."""
    cutoff = timezone.now() - timedelta(days=days)
    ids = list(Job.objects.filter(status=status, run_at__lt=cutoff, finished_at__lt=cutoff)
               .order_by().values_list("pk", flat=True)[:limit])
    if not ids:
        return 0, 0
    return delete_jobs(ids, statuses=(status,))


def delete_jobs(ids: Sequence[str], statuses: Sequence[str] = FINAL_STATUSES,
                using: str | None = None) -> tuple[int, int]:
    """Delete those of ``ids`` whose row is in ``statuses`` (final ones), with their
    ``JobAttempt`` rows, their ``JobDependency`` edges as parent and as child and the
    ``JobKey`` rows they hold, in one transaction; returns (jobs, attempts) deleted.
    Open edges of these parents are resolved first (``workflows.resolve``: their children
    released or cancelled), so no child is left waiting for a parent that no longer
    exists."""
    using = using or router.db_for_write(Job)
    with transaction.atomic(using=using):
        ids = list(Job.objects.using(using).select_for_update()
                   .filter(pk__in=list(ids), status__in=statuses).values_list("pk", flat=True))
        if not ids:
            return 0, 0
        workflows.resolve(ids, using)
        edges = JobDependency.objects.using(using)
        edges.filter(parent_id__in=ids).delete()
        edges.filter(child_id__in=ids).delete()
        # A key held by a deleted job is free (core/workflows.py): its row goes too. A call
        # of that key holding the row's lock makes this wait, and then holds a new job.
        JobKey.objects.using(using).filter(job_id__in=ids).delete()
        attempts, _ = JobAttempt.objects.using(using).filter(job_id__in=ids).delete()
        jobs, _ = Job.objects.using(using).filter(pk__in=ids).delete()
    return jobs, attempts


class Retention:
    def __init__(self, engine: Engine, settings: Settings, worker_id: str) -> None:
        self.engine, self.settings, self.worker_id = engine, settings, worker_id
        self.next_round = time.monotonic() + INTERVAL_S  # a short-lived worker never prunes
        # a Redis outage (the registry's node down) is a warning line, not a traceback
        self._outage = OutageLog(logger, "retention", quiet=(RedisError,))

    def tick(self) -> None:
        """A round when it is time: forget dead workers, delete a batch of old rows per
        status. Never raises: Redis and database errors are logged (rate-limited) and the
        round is tried again later."""
        if time.monotonic() < self.next_round:
            return
        try:
            more = self._round()
        except Exception as exc:  # noqa: BLE001 - the keeper thread must live on
            self.next_round = time.monotonic() + INTERVAL_S
            self._outage.failed(exc, INTERVAL_S)
            return
        self._outage.ok()
        self.next_round = time.monotonic() + (BACKLOG_PAUSE_S if more else INTERVAL_S)

    def _round(self) -> bool:
        """True when a batch came back full (more to delete)."""
        if not self._leads():
            return False
        self._forget_dead_workers()
        more = False
        for status, days in self.settings.retention:
            jobs, attempts = delete_batch(status, days)
            if jobs:
                logger.info("retention: deleted %d %s job(s) older than %g days, with %d "
                            "attempt row(s)", jobs, status, days, attempts)
            more = more or jobs >= BATCH
        return more

    def _leads(self) -> bool:
        """This worker is the one that does the rounds: the smallest id among the workers
        that heartbeated within two leases (every worker reads the same registry)."""
        horizon = self.engine.time_ms() - 2 * self.settings.lease_ms
        live = [w.id for w in self.engine.workers() if w.beat_ms >= horizon]
        return bool(live) and min(live) == self.worker_id

    def _forget_dead_workers(self) -> None:
        forget_ms = forget_after_ms(self.settings)
        forgotten = self.engine.forget_silent_workers(self.engine.time_ms() - forget_ms)
        for worker_id in forgotten:
            logger.info("forgot worker %s: no heartbeat for over %.0fs", shown(worker_id),
                        forget_ms / 1000)
        # their clean stops, and any older than the horizon (an entry a data loss took)
        worker_stops.forget(forgotten, timezone.now() - timedelta(milliseconds=forget_ms))
