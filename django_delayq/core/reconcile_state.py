"""What one reconciler remembers between ticks: where its walks are, the rows it looks
at twice, what it did, and the Redis outage it saw (``core/reconcile.py``).

**After an outage, no long grace.** The incremental pass leaves alone rows changed
within ``RECONCILE_GRACE_SECONDS``: their on-commit enqueue may still be on its way.
When this reconciler saw Redis (or some of a queue's data sets) fail and then answer
again, the cause of a missing job is known: ``schedule()`` calls during the outage
could not enqueue. ``Outage`` then asks for one pass over the rows changed since
``OUTAGE_MARGIN_SECONDS`` before the first failure it saw, starting
``OUTAGE_GRACE_SECONDS`` after Redis answered (an enqueue in flight at that moment has
landed by then), with the incremental pass's second look: a row found missing is
re-enqueued only when a later look finds it unchanged and still missing, so a job acked
moments ago (its settled record or its audit row on the way) is not run again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from django_delayq.models import LIVE_STATUSES, Job, JobStatus

OUTAGE_MARGIN_SECONDS = 5.0  # rows changed this long before the first failure seen
OUTAGE_GRACE_SECONDS = 2.0  # after Redis answers again: then the rows are looked at


@dataclass(slots=True)
class Cursor:
    """Position of a walk over live rows: status index, then (run_at, pk). ``since``:
    only rows changed at or after it (None: all)."""

    status: int = 0
    after: tuple[datetime, str] | None = None
    since: datetime | None = None


@dataclass(frozen=True, slots=True)
class Suspect:
    status: str
    updated_at: datetime
    seen: float  # monotonic
    seen_ms: int  # Redis clock: workers heard from after this were alive after the look
    lost: bool  # found in a loss pass: a live worker does not keep a running row


@dataclass(slots=True)
class PassStats:
    examined: int = 0
    enqueued: int = 0
    settled: int = 0
    orphans: int = 0
    waiting_on_live_worker: int = 0
    outage_passes: int = 0
    missing: list[str] = field(default_factory=list)
    to_settle: list[str] = field(default_factory=list)


class Outage:
    """A Redis outage as this reconciler saw it: from its first failed look to the first
    look that worked again (module docstring)."""

    def __init__(self) -> None:
        self.since: datetime | None = None  # the first failure seen, this host's clock
        self.pass_at: float | None = None  # monotonic: when the pass after it may start
        self.pass_since: datetime | None = None

    def failed(self) -> None:
        if self.since is None:
            self.since = timezone.now()
        self.pass_at = None

    def worked(self) -> None:
        if self.since is not None:
            self.pass_since = self.since - timedelta(seconds=OUTAGE_MARGIN_SECONDS)
            self.pass_at = time.monotonic() + OUTAGE_GRACE_SECONDS
            self.since = None

    def take_pass(self) -> Cursor | None:
        """A walk to start now, once per outage (None: nothing to do yet)."""
        if self.pass_at is None or time.monotonic() < self.pass_at:
            return None
        self.pass_at = None
        return Cursor(since=self.pass_since)


LIGHT = ("id", "queue", "status", "worker_id", "run_at", "updated_at", "attempts",
         "cancel_requested", "callable_path", "priority")


def live_rows(cursor: Cursor, queues: tuple[str, ...], grace: float, batch: int) -> list[Job]:
    """Up to ``batch`` live rows of ``queues`` changed at least ``grace`` seconds ago, from
    ``cursor``; advances it (wraps to the start)."""
    cutoff = timezone.now() - timedelta(seconds=grace)
    while cursor.status < len(LIVE_STATUSES):
        rows = Job.objects.filter(status=LIVE_STATUSES[cursor.status], queue__in=queues,
                                  updated_at__lte=cutoff).only(*LIGHT)
        if cursor.since is not None:
            rows = rows.filter(updated_at__gte=cursor.since)
        if cursor.after is not None:
            at, pk = cursor.after
            rows = rows.filter(Q(run_at__gt=at) | Q(run_at=at, pk__gt=pk))
        found = list(rows.order_by("run_at", "pk")[:batch])
        if len(found) == batch:
            cursor.after = (found[-1].run_at, found[-1].pk)
        else:
            cursor.status, cursor.after = cursor.status + 1, None
        if found:
            return found
    cursor.status, cursor.after = 0, None
    return []


def count_lost_deliveries(rows: Sequence[Job], seeds: dict[str, int | None],
                          lost_at: Mapping[str, datetime], witnessed: set[str],
                          margin_s: float) -> None:
    """Raise the seeds of rows whose job Redis lost: a scheduled or retrying row due
    before the loss may have been claimed (and run) there without its row saying so yet,
    under the token its attempts + 1. Its next delivery gets a higher one: no token is
    handed out twice, and the audit counts the run it may have had (a job that never ran
    then shows one attempt more than its runs). Only where deliveries may have happened:
    a loss this reconciler saw happen (``witnessed``: a known epoch vanished), or one
    found on a first look at a queue that has running rows (workers were delivering); a
    first look at a Redis that never held the queue (a new deploy, the test helpers'
    outbox flush) handed out no token."""
    active: dict[str, bool] = {}
    for row in rows:
        at = lost_at.get(row.queue)
        seed = seeds.get(row.pk)
        if at is None or seed is None or row.status == JobStatus.RUNNING \
                or row.run_at > at + timedelta(seconds=margin_s):
            continue
        if row.queue not in active:
            active[row.queue] = row.queue in witnessed or Job.objects.filter(
                queue=row.queue, status=JobStatus.RUNNING).exists()
        if active[row.queue]:
            seeds[row.pk] = max(seed, row.attempts + 1)
