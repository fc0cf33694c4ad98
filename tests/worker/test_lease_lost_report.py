"""The heartbeat reports a lease lost only for a job the worker still holds: a job
settled between the heartbeat's read of the held jobs and its extend has simply ended
(its lease is gone because it was acked), and says nothing."""

from __future__ import annotations

import logging

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.helpers import point_at

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_job_acked_since_the_read_is_not_reported_lost(settings, redis_server, caplog) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    schedule("tests.jobs.noop", 1)
    schedule("tests.jobs.noop", 2)
    engine = get_engine()
    acked, held = engine.claim("default", 10, 60_000).jobs
    # Both leases are gone; only `held` is still held by the worker (its lease lost).
    assert engine.ack("default", [(acked.id, acked.token), (held.id, held.token)]) == [True,
                                                                                        True]
    live = Worker(engine, get_settings(), WorkerOptions(queues=("default",), concurrency=1,
                                                        worker_id="w-test")).housekeeping
    with caplog.at_level(logging.WARNING, logger="django_delayq.worker.housekeeping"):
        live.heartbeat([acked, held], claimed=2, processed=1, holding=lambda: [held])
    lost = [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()]
    assert lost == ["job %s: lease lost while held by this worker" % held.id]
