"""What a key does at ``schedule()`` time: ``on_conflict="keep"``, ``"replace"``, ``"drop"``.

``keep`` (the default) is an idempotency key: the job's id derives from (queue, key), so
the second INSERT of that id fails and the first job stands, forever. ``replace`` and
``drop`` give each job a fresh id and record the key's holder in a ``JobKey`` row, one per
(queue, key), unique. In the caller's transaction a call creates that row if it is
missing (``INSERT ... ON CONFLICT DO NOTHING``; its first holder is the ``keep`` id of the
key, so a ``keep`` job already there counts), locks it (``SELECT ... FOR UPDATE``), reads
the holder's job row and decides:

- the holder is pending (``scheduled``, ``retrying``, ``waiting``): ``drop`` returns it;
  ``replace`` cancels it (the engine's cancel first, as ``cancel()`` does) and takes the key;
- it is running: ``drop`` returns it; ``replace`` lets it run on (its Redis entry is
  marked: a failure is not retried) and takes the key;
- it finished (any final status), or there is no such row: the new job takes the key.

The key is taken with a compare-and-set ``UPDATE ... WHERE job_id = <holder read>``.
**Invariant: the calls of one (queue, key) take its row lock one after the other, each
seeing the holder the previous one committed**, so at most one job of the key is pending
(``replace``: the last committed call's) and ``drop`` creates a job only when the holder
is final. The lock is held until the caller's transaction ends. See docs/internals.md,
"Deduplication keys".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from django_delayq import signals
from django_delayq.core import commit_batch, ids, workflows
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.options import DROP, KEEP, JobSpec
from django_delayq.engine.outcomes import CancelOutcome
from django_delayq.exceptions import DelayQError
from django_delayq.models import FINAL_STATUSES, UNFINISHED_STATUSES, Job, JobKey, JobStatus

logger = logging.getLogger(__name__)

ROUNDS = 5  # compare-and-set attempts; the row lock makes the first one succeed


def insert(row: Job, spec: JobSpec, parents: list[str], on_failure: bool, using: str,
           now: datetime) -> str | None:
    """Insert a keyed or waiting job in a savepoint. None: ``row`` was inserted; else the
    id of the job that stands instead (``keep``: the key's first; ``drop``: the live one)."""
    keep = spec.on_conflict == KEEP
    try:
        with transaction.atomic(using=using):
            if parents:  # waiting, cancelled or scheduled: core/workflows.py
                plan = workflows.plan(row.id, parents, on_failure, using,
                                      keyed=spec.key is not None and keep)
                plan.apply(row, now)
            # A job born final (a parent already failed: cancelled) takes no key: it would
            # replace the live job with one that never runs.
            if spec.key is not None and not keep and row.status not in FINAL_STATUSES:
                live = take(row, spec.on_conflict, using)
                if live is not None:
                    return live
            row.save(force_insert=True, using=using)
            if parents:
                plan.save_edges(using)
    except IntegrityError:
        if spec.key is None or not keep:
            raise
        return row.id  # same key, same id: the first job stands
    return None


def take(row: Job, mode: str, using: str) -> str | None:
    """Make ``row`` (not saved yet) the holder of its key, as ``mode`` says; returns the
    id of the live holder that stands instead (``drop``), else None."""
    keys = JobKey.objects.using(using)
    which = {"queue": row.queue, "key": row.key}
    for _ in range(ROUNDS):
        keys.bulk_create([JobKey(**which, job_id=ids.id_for_key(row.queue, str(row.key)))],
                         ignore_conflicts=True)
        holder = keys.select_for_update().filter(**which).values_list("job_id",
                                                                      flat=True).first()
        if holder is None:
            continue  # deleted meanwhile: create it again
        live = _live(holder, using)
        if live is not None and mode == DROP:
            return live.id
        if live is not None:
            _replace(live, row.id, using)
        if keys.filter(**which, job_id=holder).update(job_id=row.id):
            return None
    raise DelayQError("key %r of queue %r: its holder changed %d times in a row while this "
                      "call tried to take it" % (row.key, row.queue, ROUNDS))


def eager_runner(run: Callable[[str], object], on_conflict: str) -> Callable[[str], object]:
    """Eager mode's runner for a job scheduled with ``on_conflict``: a job replaced before
    the commit that runs it is final, and is not run (as a worker would not)."""
    if on_conflict == KEEP:
        return run

    def run_live(job_id: str) -> None:
        if Job.objects.filter(pk=job_id, status__in=UNFINISHED_STATUSES).exists():
            run(job_id)
    return run_live


def _live(job_id: str, using: str) -> Job | None:
    """The holder's row if it is not final (pending or running)."""
    return (Job.objects.using(using).filter(pk=job_id, status__in=UNFINISHED_STATUSES)
            .only("id", "queue", "status", "callable_path").first())


def _replace(old: Job, new_id: str, using: str) -> None:
    """Cancel ``old``, replaced by ``new_id``, the way ``cancel()`` does: Redis first (a
    job it cancels never runs; one already running runs on, marked not to be retried);
    the row decides when Redis does not hold the job yet, and Redis is told after commit
    (a worker never runs a job whose row is final). Eager mode has no Redis: the row."""
    if old.status == JobStatus.WAITING or get_settings().eager:  # not in Redis
        outcome = CancelOutcome.CANCELLED
    else:
        try:
            outcome = get_engine().cancel(old.queue, old.id)
        except RedisError as exc:  # as when it is not in Redis: the row decides
            logger.warning("job %s: Redis unavailable for its cancel (%s); its row decides "
                           "(a worker does not run a job whose row is final)", old.id, exc)
            outcome = CancelOutcome.NOT_FOUND
        if outcome is CancelOutcome.NOT_FOUND and old.status in (JobStatus.SCHEDULED,
                                                                 JobStatus.RETRYING):
            outcome = CancelOutcome.CANCELLED
            commit_batch.after_sends(using, lambda: get_engine().cancel(old.queue, old.id))
    if outcome is not CancelOutcome.CANCELLED:
        return  # running (or its end not recorded yet): it runs on, the key moves on
    now, reason = timezone.now(), "replaced by %s" % new_id
    if Job.objects.using(using).filter(pk=old.pk, status__in=UNFINISHED_STATUSES).update(
            status=JobStatus.CANCELLED, last_error=reason, finished_at=now, updated_at=now):
        workflows.resolve([old.pk], using)  # its waiting children follow
        logger.info("job %s cancelled: %s", old.id, reason)
        signals.send(signals.job_cancelled, job_id=old.id, queue=old.queue,
                     callable_path=old.callable_path, running=False)
