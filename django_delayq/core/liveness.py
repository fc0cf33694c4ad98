"""Which workers are alive, and what a re-enqueued job's attempts counter starts from.

The workers registry (``Engine.workers`` & co.: each worker's last heartbeat, Redis ms)
tells the reconciler whether a row's worker may still flush it (alive: it heartbeated
within two leases) or died with its audit buffer (silent for ``SILENT_BEATS`` heartbeat
periods).

Attempts and lease tokens across a re-enqueue
---------------------------------------------
The attempts counter in Redis is the lease token. A re-enqueue seeds it (HSETNX, in the
same MULTI as enqueue.lua: never lowers a counter Redis holds) so that the next
delivery's token is higher than any token the job may have been given:

* ``running`` row: seeded with the row's attempts (that attempt ran or is lost);
* ``scheduled``/``retrying`` row due by now: a worker may have claimed it, run it and
  died before its first audit write (the row says nothing of that run). That happened
  when a worker active since the row was last written has gone silent (its heartbeat
  is older than ``SILENT_BEATS`` heartbeat periods): the counter is seeded with
  attempts + 1, so the re-run is attempt n + 2, under a token of its own, and the audit
  counts the unrecorded run. While such a worker has been neither heard from since the
  first look nor silent long enough, the decision waits. A row never delivered (the
  outbox: Redis was down at commit) keeps its count: its first run is attempt 1.

``JobAttempt`` numbers are not a further source: they are written in the same
transaction as the row's attempts, and exceed them only after a requeue, which restarts
the count on purpose.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from django.utils import timezone

from django_delayq.core.reconcile_state import LIGHT
from django_delayq.core.validation import at_ms
from django_delayq.models import Job, JobStatus

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine

# A worker whose heartbeat (every LEASE_SECONDS / 3) is this many periods old may be dead.
SILENT_BEATS = 2


class Liveness:
    """The workers' heartbeats as the reconciler of ``engine`` reads them."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine, self.settings = engine, settings

    def alive(self, worker_ids: set[str]) -> set[str]:
        """Those of ``worker_ids`` that heartbeated within two leases."""
        ids = sorted(w for w in worker_ids if w)
        if not ids:
            return set()
        scores = self.engine.worker_beats(ids)
        horizon = self.engine.time_ms() - 2 * self.settings.lease_ms
        return {w for w, score in zip(ids, scores) if score is not None and score >= horizon}

    @property
    def silent_ms(self) -> int:
        """How old a heartbeat is when its worker may be dead (``SILENT_BEATS`` periods)."""
        return SILENT_BEATS * self.settings.lease_ms // 3

    def orphaned(self, queues: Sequence[str], skip: Container[str], batch: int) -> list[Job]:
        """The oldest ``batch`` running rows of ``queues`` (not in ``skip``) unchanged for two
        leases whose worker is silent: died (or stopped) with its audit buffer, so its
        flush is not coming. Running rows are as many as the workers' threads: one query,
        one ZMSCORE."""
        cutoff = timezone.now() - timedelta(seconds=2 * self.settings.lease_seconds)
        rows = [r for r in Job.objects.filter(status=JobStatus.RUNNING, queue__in=queues,
                                              updated_at__lte=cutoff)
                .only(*LIGHT).order_by("updated_at")[:batch] if r.pk not in skip]
        alive = self.alive({r.worker_id for r in rows}) if rows else set()
        return [r for r in rows if r.worker_id not in alive]

    def any_alive(self) -> bool:
        """Whether any worker heartbeated lately (its audit flush may be on its way)."""
        now = self.engine.time_ms()
        return bool(self.engine.count_workers(now - self.silent_ms))

    def seeds(self, rows: Sequence[Job], seen_ms: Mapping[str, int] | None,
              margin_s: float) -> dict[str, int | None]:
        """The attempts counter each re-enqueued job starts from (None: decide later).

        A scheduled or retrying row due by now may describe a job a worker ran and died
        before recording: counted (+1) when a worker active since the row was written has
        gone silent; not counted when every such worker was heard from after the first
        look (its flush would have changed the row); undecided otherwise. ``seen_ms``:
        when each row was first found missing (Redis ms), None on a first look;
        ``margin_s``: how far ahead of now a row's due time still counts as due."""
        seeds: dict[str, int | None] = {r.pk: r.attempts for r in rows}
        now = timezone.now()
        due = [r for r in rows if r.status != JobStatus.RUNNING
               and r.run_at <= now + timedelta(seconds=margin_s)]
        if not due:
            return seeds
        offset_ms = self.engine.time_ms() - at_ms(now)  # Redis clock - this host's clock

        def since(row: Job) -> int:  # a worker that delivered it was alive after this
            return at_ms(max(row.updated_at, row.run_at)) + offset_ms - self.settings.lease_ms

        # The last heartbeats (Redis ms) of the workers heard from since the oldest row's
        # moment, and the beat a worker silent (dead, most likely) last gave at the latest.
        silent_before = self.engine.time_ms() - self.silent_ms
        beats = tuple(self.engine.beats_since(min(since(r) for r in due)))
        for row in due:
            first, active = seen_ms.get(row.pk) if seen_ms else None, since(row)
            if any(active <= b < silent_before for b in beats):  # one active since has gone silent
                seeds[row.pk] = row.attempts + 1
            elif first is not None and not all(b > first for b in beats if b >= active):
                seeds[row.pk] = None  # not every one active since was heard after the look
        return seeds
