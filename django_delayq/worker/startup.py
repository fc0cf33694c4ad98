"""Start-up of a worker process: waiting for Redis before anything else."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from redis.exceptions import RedisError

from django_delayq.engine import Engine

logger = logging.getLogger(__name__)


def wait_for_redis(make_engine: Callable[[], Engine]) -> Engine:
    """The engine once Redis answers: the worker waits out an outage at start-up (a Redis
    Cluster client cannot even be created while no node answers)."""
    delay = 0.1
    while True:
        try:
            engine = make_engine()
            engine.ping()
            return engine
        except RedisError as exc:
            logger.warning("waiting for Redis (%s); next try in %.1fs", exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
