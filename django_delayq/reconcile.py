"""The outbox reconciler: audit rows that should be in Redis but are not get enqueued.

The row is the durable record. A row in a live status (scheduled, retrying, running)
whose job has no envelope in Redis was never enqueued (Redis was down at commit) or
was lost (Redis restarted without persistence). The reconciler walks live rows in
bounded, keyset-paginated batches (one query and one pipelined Redis round trip per
batch), skipping rows changed within ``RECONCILE_GRACE_SECONDS`` (their enqueue or
audit flush may still be on its way), and re-enqueues the missing ones. Enqueue is
idempotent by id, so a job is never doubled by the reconciler.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from django_delayq.conf import Settings
from django_delayq.engine import Engine, NewJob
from django_delayq.engine.envelope import Envelope
from django_delayq.models import LIVE_STATUSES, Job

logger = logging.getLogger(__name__)


class Reconciler:
    def __init__(self, engine: Engine, settings: Settings, queues: tuple[str, ...]) -> None:
        self.engine = engine
        self.settings = settings
        self.queues = queues
        self._cursor: tuple[datetime, str] | None = None
        self._last = 0.0

    def tick(self) -> int:
        """Run one batch if ``RECONCILE_INTERVAL_SECONDS`` have passed; returns re-enqueued."""
        now = time.monotonic()
        if now - self._last < self.settings.reconcile_interval_seconds:
            return 0
        self._last = now
        return self.run_once()

    def run_all(self, batch: int = 500, grace_seconds: float | None = None) -> int:
        """Walk every live row once (``manage.py delayq_reconcile``)."""
        self._cursor = None
        total = self.run_once(batch, grace_seconds)
        while self._cursor is not None:
            total += self.run_once(batch, grace_seconds)
        return total

    def run_once(self, batch: int = 500, grace_seconds: float | None = None) -> int:
        grace = self.settings.reconcile_grace_seconds if grace_seconds is None else grace_seconds
        rows = Job.objects.filter(status__in=LIVE_STATUSES, queue__in=self.queues,
                                  updated_at__lte=timezone.now() - timedelta(seconds=grace))
        if self._cursor is not None:
            at, pk = self._cursor
            rows = rows.filter(Q(updated_at__gt=at) | Q(updated_at=at, pk__gt=pk))
        found = list(rows.order_by("updated_at", "pk")[:batch])
        self._cursor = (found[-1].updated_at, found[-1].pk) if len(found) == batch else None
        if not found:
            return 0
        pipe = self.engine.client.pipeline(transaction=False)
        for row in found:
            pipe.hexists(self.engine.keys(row.queue).jobs, row.pk)
        missing = [row for row, present in zip(found, pipe.execute()) if not present]
        by_queue: dict[str, list[NewJob]] = {}
        for row in missing:
            envelope = Envelope(path=row.callable_path, args=row.args, kwargs=row.kwargs,
                                max_attempts=row.max_attempts, backoff=row.backoff).encode()
            by_queue.setdefault(row.queue, []).append(
                NewJob(id=row.pk, envelope=envelope, at_ms=int(row.run_at.timestamp() * 1000)))
        added = sum(self.engine.enqueue(queue, jobs) for queue, jobs in by_queue.items())
        if added:
            logger.warning("reconciler re-enqueued %d job(s) missing from Redis", added)
        return added
