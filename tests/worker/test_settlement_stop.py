"""Settlement's stop: what finished is settled in Redis and recorded, none left unread."""

from __future__ import annotations

import pytest

from django_delayq import schedule
from django_delayq.core import payloads
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.worker.conftest import run_claimed

pytestmark = pytest.mark.django_db(transaction=True)


def test_outcomes_left_at_stop_are_acked_and_recorded(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """A success no job thread sent (left to the settling thread) when the worker stops:
    the last round settles it with a call and records it. (Its ack used to go through
    the stream after the reader had stopped: acked in Redis, never recorded.)"""
    handles = [schedule("tests.jobs.add", i, 1) for i in range(3)]
    engine = get_engine()
    worker = Worker(engine, get_settings(), WorkerOptions(queues=("default",)))
    claimed = payloads.load(engine.claim("default", 10, 60_000).jobs)
    assert len(claimed) == 3
    worker.settlement.start()
    run_claimed(worker, claimed)  # done; no job thread sends them
    worker.settlement.stop()
    worker.audit.flush()
    assert worker.ledger.idle()
    assert [h.job.status for h in handles] == [JobStatus.SUCCEEDED] * 3
    assert [h.job.result for h in handles] == [1, 2, 3]
    assert all(engine.inspect("default", h.id).place == "" for h in handles)


def test_a_failure_freeing_callable_slots_leaves_the_round_settled(delayq_settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Freeing the callable-limit slots fails with an error that is no RedisError (a
    cluster client's): the round is still settled, recorded and forgotten (no job left
    waiting on it, the worker idle for a drain)."""
    from redis.exceptions import RedisClusterException
    handles = [schedule("tests.jobs.add", i, 1) for i in range(2)]
    engine = get_engine()
    worker = Worker(engine, get_settings(), WorkerOptions(queues=("default",)))
    s = worker.settlement
    s.stream = s.settler.stream = None  # as on a cluster client: no ack stream

    def fails(outcomes: object) -> None:
        raise RedisClusterException("slot not served")

    monkeypatch.setattr(s.settler, "release", fails)
    run_claimed(worker, payloads.load(engine.claim("default", 10, 60_000).jobs))
    for o in worker.ledger._done:  # as if each held a callable-limit slot
        o.callable_limit = "tests.jobs.add"
    s.settle_once()
    worker.audit.flush()
    assert not s._unrecorded and worker.ledger.idle()
    assert {h.status for h in handles} == {JobStatus.SUCCEEDED}
