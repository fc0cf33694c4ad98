"""The ack stream settles a sharded queue's successes too: each is acked in the shard
that holds it (the data set its claim read), and the stream's reader records it."""

from __future__ import annotations

import pytest

from django_delayq import schedule
from django_delayq.core import payloads
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.core.test_shards_settings import SHARDS
from tests.helpers import wait_until
from tests.worker.conftest import run_claimed

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sharded(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "QUEUE_OPTIONS": {"emails": {"shards": SHARDS}}}
    return delayq_settings


def test_a_sharded_queues_successes_are_acked_through_the_stream_in_their_shards(
        sharded) -> None:  # type: ignore[no-untyped-def]
    handles = [schedule("tests.jobs.add", i, 1, queue="emails") for i in range(12)]
    engine = get_engine()
    worker = Worker(engine, get_settings(), WorkerOptions(queues=("emails",)))
    thread = worker.settlement
    assert thread.stream is not None  # one server: one connection to write to
    claimed = payloads.load(engine.claim("emails", 20, 60_000).jobs)
    assert len(claimed) == 12 and len({job.home for job in claimed}) > 1  # several shards
    run_claimed(worker, claimed)
    thread.finished()  # a job thread's send: every success done so far
    assert worker.ledger.unsettled_queues() == set()  # none left to the settling thread
    assert thread.stream.in_flight() >= 1
    worker.settlement.start()  # the reader reads the replies and records them
    wait_until(worker.ledger.idle, timeout=10)
    worker.settlement.stop()
    worker.audit.flush()
    assert sorted(h.job.result for h in handles) == list(range(1, 13))
    assert {h.job.status for h in handles} == {JobStatus.SUCCEEDED}
    stats = engine.stats("emails")
    assert (stats.ready, stats.scheduled, stats.inflight) == (0, 0, 0)
