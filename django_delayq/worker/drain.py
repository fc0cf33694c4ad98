"""A drain's hand-back: the claimed jobs no thread has started go back to Redis."""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from django_delayq.engine import ClaimedJob, Engine
from django_delayq.worker.ledger import Ledger

logger = logging.getLogger(__name__)


def release_unstarted(engine: Engine, ledger: Ledger) -> None:
    """Give back (uncharged) the jobs the ledger holds that no thread has started; one
    that cannot be given back keeps its lease until it expires, then recovery runs it."""
    jobs = ledger.release_unstarted()
    by_queue: dict[str, list[ClaimedJob]] = {}
    for job in jobs:
        by_queue.setdefault(job.queue, []).append(job)
    for queue, claimed in by_queue.items():
        try:
            engine.release(queue, claimed)
        except RedisError as exc:  # their leases will expire; recovery runs them
            logger.warning("could not release %d job(s): %s", len(claimed), exc)
    if jobs:
        logger.info("released %d claimed job(s) that had not started", len(jobs))
