"""The send to Redis of committed jobs, before the caller goes on.

``send(queue, jobs)`` is the one send of committed jobs (``commit_batch`` calls it at
commit, or at once in autocommit; ``api.enqueue_or_outbox``, the same function, serves
Spark's sink): one ``Engine.enqueue`` of the current settings' engine, split by the engine
into script calls of ``scripts.MAX_ENQUEUE``. When it returns, the jobs are in Redis:
``schedule()`` in autocommit returns with its job in Redis, and a worker, ``cancel()`` or
a test helper of the same process reading Redis next finds it there.

**Invariant: a job whose row committed reaches Redis, or the reconciler brings it
there.** The row is committed before the send; a send that fails (Redis down) is logged
and never fails the caller: its rows stay ``scheduled`` (the row is the outbox) and the
reconciler enqueues them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from django_delayq.core.connection import get_engine

if TYPE_CHECKING:
    from django_delayq.engine.outcomes import NewJob

logger = logging.getLogger(__name__)


def send(queue: str, jobs: list[NewJob]) -> None:
    """Send committed jobs to Redis (the engine of the current settings)."""
    try:
        get_engine().enqueue(queue, jobs)  # a cluster client connects when it is made
    except RedisError as exc:
        logger.warning("Redis unavailable; %d job(s) of queue %r stay in the outbox for the "
                       "reconciler: %s", len(jobs), queue, exc)
    except Exception:  # noqa: BLE001 - the rows are committed: never fail the caller
        logger.exception("sending %d job(s) of queue %r to Redis failed; the reconciler "
                         "enqueues them", len(jobs), queue)
