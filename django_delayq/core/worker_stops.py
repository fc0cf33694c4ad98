"""Workers that stopped cleanly but are still in Redis's workers registry.

A worker that drains takes itself out of the registry (``Engine.unregister_worker``) once
its audit buffer is written: from then on, no reconciler waits for its flush or counts
its silence. When Redis does not answer at that moment, its entry stays, with the last
heartbeat it gave, and falls silent like a crashed worker's; the reconciler would then
charge every due row it might have run unrecorded (``reconcile_state.Liveness.seeds``),
although this worker recorded every run it made. So the worker writes its clean stop
into the database instead (``StoppedWorker``, ``record``), and the reconciler leaves out
the silent entries of workers that stopped so after their last heartbeat (``stopped``).
A worker id names one process start (``worker/loop.py``): no later beat can come under
it. A row goes when the registry forgets the entry, or once it is older than the
registry's forget horizon (an entry a Redis data loss took: ``forget``).

Code of this version may run before ``migrate`` created the table (a rolling deploy):
``stopped`` then knows no clean stop (the silent entries are charged, as before).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from django.db import DatabaseError, router, transaction
from django.utils import timezone

from django_delayq.core.validation import at_ms
from django_delayq.engine.logtext import shown
from django_delayq.models import StoppedWorker

logger = logging.getLogger(__name__)

# A worker whose heartbeat (every LEASE_SECONDS / 3) is this many periods old may be dead.
SILENT_BEATS = 2
_unreadable = [False]  # the table could not be read once already: later failures at debug


def record(worker_id: str) -> bool:
    """``worker_id`` drained with its audit buffer written, but is still registered in Redis.
    Best effort (the database may be down as the worker stops): False when not written."""
    try:
        StoppedWorker.objects.using(router.db_for_write(StoppedWorker)).update_or_create(
            worker_id=worker_id, defaults={"stopped_at": timezone.now()})
    except DatabaseError as exc:
        logger.warning("worker %s: could not record its clean stop either (%s); it counts "
                       "as a worker that may have died", shown(worker_id), shown(exc))
        return False
    logger.info("worker %s: Redis unreachable at stop; its clean stop is recorded in the "
                "database instead of leaving the workers registry", shown(worker_id))
    return True


def forget(worker_ids: Iterable[str], before: datetime | None = None) -> None:
    """Their entries left the registry: their clean stops explain nothing any more; nor
    does a stop dated ``before`` (the registry's forget horizon: an entry still listed has
    beaten since, so that stop would not be trusted; an entry gone without being
    forgotten, in a Redis data loss, leaves it behind). Best effort: a row left behind is
    a few bytes, read only with its id's entry."""
    ids = list(worker_ids)
    if not ids and before is None:
        return
    rows = StoppedWorker.objects.using(router.db_for_write(StoppedWorker))
    try:
        rows.filter(worker_id__in=ids).delete()
        if before is not None:
            rows.filter(stopped_at__lt=before).delete()
    except DatabaseError as exc:
        logger.debug("could not forget the clean stops of %d worker(s): %s", len(ids),
                     shown(exc))


def stopped(beats: Iterable[tuple[str, float]], offset_ms: int) -> set[str]:
    """The workers of ``beats`` (id, last heartbeat in Redis ms) that stopped cleanly after
    that heartbeat. ``offset_ms``: Redis's clock minus this host's (the stop is written
    on the stopping worker's clock): a stop dated before the beat (that host's clock
    behind Redis's) is not trusted: the worker counts as one that may have died. The
    table unreadable (not migrated yet): none (a savepoint keeps a caller's transaction)."""
    last = dict(beats)
    if not last:
        return set()
    using = router.db_for_read(StoppedWorker)
    try:
        with transaction.atomic(using=using):
            rows = list(StoppedWorker.objects.using(using).filter(
                worker_id__in=list(last)).values_list("worker_id", "stopped_at"))
    except DatabaseError as exc:
        log = logger.debug if _unreadable[0] else logger.warning
        _unreadable[0] = True
        log("clean stops unreadable (%s; migrations not applied?): silent workers count as "
            "workers that may have died", shown(exc))
        return set()
    return {w for w, at in rows if at_ms(at) + offset_ms >= last[w]}
