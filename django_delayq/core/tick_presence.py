"""Pending tick jobs that Redis does not hold, put back at once (core/periodic.py).

A tick's job is created by a worker that starts the tick before it (``tick_started``) or
by a keeper pass: its row commits, then it is sent to Redis. When that send fails (Redis
unreachable for a moment), the row is in the outbox, and the reconciler leaves rows alone
for ``RECONCILE_GRACE_SECONDS`` (their send may still be on its way): the schedule would
stop for up to that long. So the keeper looks: every tick job a worker creates (when it
starts the tick before it) and every schedule's pending tick job at each keeper pass is
*watched* (``watch``); the keeper thread's ``confirm`` (every half second) asks Redis
where they are (``Engine.presence``) and enqueues, idempotently by id, each one whose row
is still ``scheduled`` and which Redis holds nowhere. A Redis or database error keeps
the ids watched: they are looked at again at the next ``confirm``, so a tick job missed
during an outage is in Redis within a second of Redis coming back.

Never a second run of a tick that ran: an id is put back only when

* Redis holds it nowhere (pending, ready, in flight, dead), holds no record of its
  settle (an ack whose audit row has not landed) and no reconciler re-enqueued it moments
  ago;
* its row, read again after that look, is still ``scheduled`` (a worker marks it
  ``running`` when it starts it) and was changed more than ``SEND_GRACE`` ago (its own
  send, at its transaction's commit, may still be on its way);
* its schedule, read after that look too, still points at it as its next tick and not as
  its last one (``tick_started`` writes that before the tick's function runs).

However long ago the row changed: a tick job whose send failed during an outage longer
than the reconciler's grace, or one Redis lost with its data (the reconciler's loss pass
then walks every live row of the queue, behind whatever backlog it holds), is one row per
schedule, put back within a second of Redis answering.

It goes back as the reconciler puts a job back (``queues.reenqueue_rows``: reenqueue.lua,
seeded with its row's attempts): its next delivery's token comes from the Redis clock, so
a worker still holding a copy delivered in the lost data (unstarted: its row says
``scheduled``) has a token no new delivery gets, and its ack or extend is refused; its
attempt number is the row's attempts + 1, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import DatabaseError
from django.utils import timezone

from django_delayq.core import queues, reconcile_state
from django_delayq.core.connection import get_engine
from django_delayq.engine.logtext import shown
from django_delayq.engine.shard_health import OUTAGES
from django_delayq.models import Job, JobStatus

logger = logging.getLogger(__name__)

SEND_GRACE = timedelta(seconds=2)  # a row younger than this: its own send may be on its way
CONFIRM_EVERY_S = 0.5  # how often the keeper thread looks at the watched ids
WATCH_MAX_S = 600.0  # a watched id no look could decide is left to the reconciler after this
WATCH_MAX_IDS = 100_000  # a process whose keeper never looks (no worker) keeps no more

_lock = threading.Lock()
_watched: dict[str, float] = {}  # tick job id -> monotonic time it was first watched
_last_confirm = [-1e18]


def watch(job_ids: Iterable[str]) -> None:
    """Have the keeper thread make sure these tick jobs are in Redis (``confirm``)."""
    now_s = time.monotonic()
    with _lock:
        for job_id in job_ids:
            if job_id and len(_watched) < WATCH_MAX_IDS:
                _watched.setdefault(job_id, now_s)


def watched() -> list[str]:
    with _lock:
        return list(_watched)


def confirm(force: bool = False) -> int:
    """Look at the watched tick jobs (at most every ``CONFIRM_EVERY_S`` unless
    ``force``): put back those Redis lacks, forget those decided. Returns how many were
    enqueued. Never raises: an error keeps them watched."""
    now_s = time.monotonic()
    with _lock:
        if not _watched or (not force and now_s - _last_confirm[0] < CONFIRM_EVERY_S):
            return 0
        _last_confirm[0] = now_s
        ids = list(_watched)
    undecided, added = set(ids), 0  # unless the look decides
    try:
        undecided, added = put_back(ids)
    except (*OUTAGES, DatabaseError) as exc:  # a node down: no traceback each half second
        logger.debug("schedules: could not look at %d tick job(s) yet: %s", len(ids),
                     shown(exc))
    except Exception:  # noqa: BLE001 - the keeper thread must live on
        logger.exception("schedules: looking at %d tick job(s) failed", len(ids))
    with _lock:
        for job_id in ids:
            if job_id not in undecided or now_s - _watched.get(job_id, now_s) > WATCH_MAX_S:
                _watched.pop(job_id, None)
    return added


def put_back(job_ids: list[str], now: datetime | None = None) -> tuple[set[str], int]:
    """Enqueue those of ``job_ids`` that are pending tick jobs Redis lacks (see the module
    docstring); returns the ids to look at again (rows too young to tell) and how many
    were enqueued. Redis and database errors propagate."""
    now = now or timezone.now()
    rows = Job.objects.filter(pk__in=job_ids, status=JobStatus.SCHEDULED).only(
        "id", "queue", "updated_at")
    # Redis holds it nowhere (nor a record of its settle, nor a recent re-enqueue of it)
    missing = [row for row, p in reconcile_state.places(get_engine(), list(rows)) if not (
        p.queued or p.dead or p.settled is not None or p.reconciled_ms is not None)]
    young = {r.pk for r in missing if r.updated_at > now - SEND_GRACE}
    back = queues.pending_ticks((r.pk for r in missing if r.pk not in young), to_run=True)
    if back:
        logger.warning("schedules: %d tick job(s) missing from Redis (a failed send, or "
                       "data Redis lost) enqueued again: %s", len(back),
                       ", ".join(shown(i) for i in sorted(back)[:5]))
    return young, queues.reenqueue_rows(back)
