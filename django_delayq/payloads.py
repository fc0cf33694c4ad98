"""Job payloads come from the audit row: Redis holds only ids (``docs/internals.md``).

The row is written, in the caller's transaction, before the id reaches Redis, and it
already holds everything a job needs (callable, arguments, attempts, backoff). Keeping a
second copy in Redis cost ~120 bytes a pending job; reading the rows of a claimed batch
costs one indexed query per batch. Rows are read from the database rows are written to
(``db_for_write``): a replica that lags behind could miss a row committed a millisecond
ago. A job enqueued with an envelope in Redis (the bare engine, or a job from an older
version) still runs from that envelope.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence

from django.db import router

from django_delayq.engine import ClaimedJob
from django_delayq.engine.envelope import Envelope
from django_delayq.models import Job

_FIELDS = ("id", "callable_path", "args", "kwargs", "max_attempts", "backoff")


def load(jobs: Sequence[ClaimedJob]) -> list[ClaimedJob]:
    """``jobs`` with the payload of each envelope-less one read from its row (one query).

    A job without a row keeps no payload (the runner ends it dead, naming why); a row
    whose arguments are not a list and a dict gets them as an envelope, which the
    runner's decoding rejects with the reason.
    """
    need = [job.id for job in jobs if not job.envelope and job.payload is None]
    if not need:
        return list(jobs)
    found: dict[str, ClaimedJob] = {}
    by_id = {job.id: job for job in jobs}
    using = router.db_for_write(Job)  # never a lagging replica
    for pk, path, args, kwargs, max_attempts, backoff in (
            Job.objects.using(using).filter(pk__in=need).values_list(*_FIELDS)):
        job = by_id[pk]
        if isinstance(args, list) and isinstance(kwargs, dict):
            payload = Envelope(path=path, args=args, kwargs=kwargs, max_attempts=max_attempts,
                               backoff=backoff)
            found[pk] = dataclasses.replace(job, payload=payload)
        else:
            raw = json.dumps([path, args, kwargs, max_attempts, backoff])
            found[pk] = dataclasses.replace(job, envelope=raw)
    return [found.get(job.id, job) for job in jobs]


def max_attempts(ids: Iterable[str]) -> dict[str, int]:
    """The ``max_attempts`` of each job id that has a row (for lease recovery)."""
    ids = list(ids)
    if not ids:
        return {}
    using = router.db_for_write(Job)  # never a lagging replica
    return dict(Job.objects.using(using).filter(pk__in=ids)
                .values_list("id", "max_attempts"))


def of(job: ClaimedJob) -> Envelope:
    """The job's payload; ``ValueError`` naming the problem when it has none."""
    if job.payload is not None:
        return job.payload
    if not job.envelope:
        raise ValueError("no payload: Redis holds no envelope for this job and it has no "
                         "audit row (deleted?)")
    return Envelope.decode(job.envelope)
