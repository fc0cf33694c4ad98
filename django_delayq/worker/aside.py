"""Jobs claimed from Redis that must not run (no audit row, or a final one) leave
Redis's in-flight set here, each with a warning and a count (``payloads.read`` decides
which; this module acts on it, a layer above, where the metrics live)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django_delayq.core.payloads import NO_ROW, Aside
from django_delayq.engine import Engine
from django_delayq.observe import prometheus

logger = logging.getLogger(__name__)


def set_aside(engine: Engine, queue: str, items: Sequence[Aside], dead_max: int) -> None:
    """Take jobs that must not run out of Redis's in-flight set, with a warning each: a job
    without a row goes to the dead set; one whose row is final, or belongs to another queue
    (a copy of its id in this queue's keys), is forgotten here (ack: this queue's keys
    only, so a job waiting in its own queue stays there). The row is never touched.
    ``RedisError`` propagates (the leases then expire and the next claim sets them aside
    again)."""
    if not items:
        return
    no_row = [a for a in items if a.kind == NO_ROW]
    final = [a for a in items if a.kind != NO_ROW]
    engine.nack(queue, [(a.job.id, a.job.token, None) for a in no_row], dead_max=dead_max)
    engine.ack(queue, [(a.job.id, a.job.token) for a in final])
    for a in items:
        logger.warning("job %s (queue %r) set aside, not run: %s", a.job.id, queue, a.reason)
        prometheus.count_set_aside(queue, a.kind)
