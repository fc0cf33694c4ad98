"""The ack stream settles a sharded queue's successes too: each is acked in the shard
that holds it (the data set its claim read), and the stream's reader records it."""

from __future__ import annotations

import pytest

from django_delayq import schedule
from django_delayq.core import payloads
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine.shard_health import ShardDown
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


def test_a_heartbeat_extends_the_leases_of_the_shards_that_answer(sharded) -> None:  # type: ignore[no-untyped-def]
    """One shard's node down: the heartbeat still extends (and the ledger learns) the
    leases held on the other shards; those of the shard down keep what was known."""
    for i in range(12):
        schedule("tests.jobs.add", i, 1, queue="emails")
    engine = get_engine()
    worker = Worker(engine, get_settings(), WorkerOptions(queues=("emails",)))
    held = engine.claim("emails", 20, 300).jobs  # 0.3 s leases, then a stall
    down = held[0].home
    assert len({job.home for job in held}) > 1
    wait_until(lambda: all(worker.ledger.lease_left(job) <= 0 for job in held))
    engine.health.failed(down, ConnectionError("node down"))
    with pytest.raises(ShardDown):
        worker.housekeeping.heartbeat(held, claimed=0, processed=0)
    left = {job.id: worker.ledger.lease_left(job) for job in held}
    assert all(left[j.id] <= 0 for j in held if j.home == down)
    assert all(left[j.id] > 5 for j in held if j.home != down)  # LEASE_SECONDS 10
