"""django-delayq end to end on a real local Redis Cluster (three masters, one queue on
each): a worker process, wake-ups across nodes, a node going down and coming back
empty (the other queues served on time, the loop never spinning, the wake subscription
kept, the node's queues backing off alone), the reconciler, cancel and reschedule."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from django_delayq import cancel, reschedule, schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine import CancelOutcome
from django_delayq.engine.shard_health import OUTAGES
from django_delayq.models import JobStatus
from django_delayq.worker.queue_backoff import QueueBackoff
from tests.cluster.conftest import SPREAD, grouped_prefix, listening_worker, running_worker
from tests.helpers import wait_until

if TYPE_CHECKING:
    from django_delayq.worker.loop import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def _on_time(queue: str, delay_ms: int = 500, within_ms: float = 5000) -> None:
    """A job due in ``delay_ms`` starts within ``within_ms`` of its due time: woken by its
    wake message, not by the 60 s poll these tests set. The room is a busy machine's: the
    first job after a node stops waited 2.8 s at a load of 15 on two cores (the cluster
    client's slot refresh and the listener's move to another node, each on a starved CPU)."""
    h = schedule("tests.jobs.noop", delay=timedelta(milliseconds=delay_ms), queue=queue)
    wait_until(lambda: h.status == JobStatus.SUCCEEDED, timeout=10)
    lateness = h.job.lateness_ms()
    assert lateness is not None and lateness < within_ms, (queue, lateness)


def _count_turns(worker: Worker) -> list[int]:
    """A counter of the worker loop's turns (each computes its wait once)."""
    turns = [0]
    wait_seconds = worker._wait_seconds

    def counted() -> float:
        turns[0] += 1
        return wait_seconds()

    worker._wait_seconds = counted  # type: ignore[method-assign]
    return turns


def test_worker_process_drains_queues_that_live_on_different_nodes(  # type: ignore[no-untyped-def]
        cluster_settings, start_worker) -> None:
    engine = get_engine()
    assert isinstance(engine.client, RedisCluster)  # from REDIS_URL redis+cluster://...
    owners = {engine.client.get_node_from_key(engine.keys(q).pending).name for q in SPREAD}
    assert len(owners) == len(SPREAD)  # the cluster's own view: one queue per node
    handles = [schedule("tests.jobs.add", i, 1, queue=q) for i in range(20) for q in SPREAD]
    proc = start_worker("--queues", ",".join(SPREAD), "--concurrency", "4")
    try:
        wait_until(lambda: all(h.status == JobStatus.SUCCEEDED for h in handles), timeout=30)
    finally:
        proc.terminate()
        assert proc.wait(20) == 0
    assert sorted(h.job.result for h in handles) == sorted(i + 1 for i in range(20)
                                                           for _ in SPREAD)


def test_idle_worker_is_woken_on_time_in_every_queue(cluster_settings, redis_cluster) -> None:  # type: ignore[no-untyped-def]
    # No poll within the test: only a wake message (published on another node than the
    # listener's, for two of the three queues) can start these jobs on time.
    cluster_settings.DELAYQ = {**cluster_settings.DELAYQ, "WAKE_INTERVAL_SECONDS": 60}
    channel = get_engine().keys("default").channel
    with running_worker():  # idle once the listener is subscribed: every queue is empty
        wait_until(lambda: bool(redis_cluster.subscribed_at(channel)))
        for queue in SPREAD:
            _on_time(queue)


def test_a_node_down_stops_only_its_own_queue_and_comes_back_empty(  # type: ignore[no-untyped-def]
        cluster_settings, redis_cluster) -> None:
    cluster_settings.DELAYQ = {**cluster_settings.DELAYQ, "WAKE_INTERVAL_SECONDS": 60}
    engine = get_engine()
    with running_worker() as worker:
        turns = _count_turns(worker)
        wait_until(lambda: redis_cluster.subscribed_at(engine.keys("default").channel))
        [down] = redis_cluster.subscribed_at(engine.keys("default").channel)
        [lost] = [q for q in SPREAD if redis_cluster.node_of(engine.keys(q).pending) == down]
        stranded = schedule("tests.jobs.noop", delay=3600, queue=lost)
        redis_cluster.node(down).stop()  # the listener's node, and one queue's
        try:
            since, turned = time.monotonic(), turns[0]
            for queue in SPREAD:  # the listener moved to another node; claims go on
                if queue != lost:
                    _on_time(queue)
            # The lost queue backs off while its due time has passed: the loop sleeps to
            # the end of its delay (it spun, ~40,000 turns a second, starving the threads).
            rate = (turns[0] - turned) / (time.monotonic() - since)
            assert rate < 200, rate
            late = schedule("tests.jobs.noop", queue=lost)  # cannot reach Redis: outbox
        finally:
            redis_cluster.restart(down)  # empty: its epoch key is gone
        wait_until(lambda: late.status == JobStatus.SUCCEEDED)  # re-enqueued, no grace
        assert engine.inspect(lost, stranded.id).place == "pending"
        for queue in SPREAD:
            _on_time(queue)
    assert worker.housekeeping.reconciler.stats.enqueued >= 2


def test_the_wake_subscription_keeps_its_connection_while_a_node_is_down(  # type: ignore[no-untyped-def]
        cluster_settings, redis_cluster) -> None:
    """Each command failing on a node that is down makes the cluster client refresh its
    view of the cluster, and a refresh reconnects the connections of the client's pools.
    The listener's subscription is not one of them: reconnected, it lost the wake messages
    published meanwhile, and their jobs waited for the next poll."""
    engine = get_engine()
    with listening_worker(cluster_settings, redis_cluster) as (_, listening):
        subscription = redis_cluster.subscribers(listening)
        down = next(node.port for node in redis_cluster.nodes if node.port != listening)
        [lost] = [q for q in SPREAD if redis_cluster.node_of(engine.keys(q).pending) == down]
        redis_cluster.node(down).stop()
        try:
            for _ in range(20):  # each one refreshes the client's view of the cluster
                with pytest.raises((RedisError, RedisClusterException)):
                    engine.stats(lost)
            for queue in SPREAD:
                if queue != lost:
                    _on_time(queue)
        finally:
            redis_cluster.restart(down)
        assert redis_cluster.subscribers(listening) == subscription


def test_the_queues_of_a_node_that_is_down_back_off_alone(cluster_settings, redis_cluster) -> None:  # type: ignore[no-untyped-def]
    """Two queues on the node that is down fail together, yet a queue on another node
    works: they back off alone, and the loop goes on for that queue. Only when nothing
    works (a single Redis, or every node, is down) does the caller back off as a whole."""
    cluster_settings.DELAYQ = {**cluster_settings.DELAYQ, "PREFIX": grouped_prefix(
        redis_cluster, ("default", "emails"), "slow")}
    engine = get_engine()
    down = redis_cluster.node_of(engine.keys("default").pending)
    backoff = QueueBackoff()
    assert backoff.each(SPREAD, engine.stats) == []
    redis_cluster.node(down).stop()
    try:
        assert backoff.each(["default", "emails"], engine.stats) == ["default", "emails"]
        assert backoff.waiting("default") and backoff.waiting("emails")
        assert backoff.remaining_ms("emails") > 0  # the loop sleeps that long for them
        assert backoff.each(SPREAD, engine.stats) == ["default", "emails"]
        with pytest.raises(OUTAGES):  # never reached a queue that works
            QueueBackoff().each(["default", "emails"], engine.stats)
    finally:
        redis_cluster.restart(down)


def test_reconciler_reenqueues_the_rows_of_a_wiped_queue(cluster_settings) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    wiped = [schedule("tests.jobs.noop", i, delay=3600) for i in range(5)]
    kept = [schedule("tests.jobs.noop", i, delay=3600, queue="emails") for i in range(3)]
    r = Reconciler(engine, get_settings(), SPREAD)
    assert r.tick() == 0  # first look: creates each queue's epoch; nothing is missing
    engine.purge("default")  # the queue's keys, its epoch included, on one node
    assert engine.inspect("default", wiped[0].id).place == ""
    r._last_epoch = -1e18  # look at the epochs now rather than in a second
    added = [r.tick()]  # rows changed within 2 s of the loss get a second look first
    wait_until(lambda: bool(added.append(r.tick())) or sum(added) == len(wiped), timeout=10)
    for h in wiped:  # back, at the due time their row says
        loc = engine.inspect("default", h.id)
        assert (loc.place, loc.score_ms) == ("pending", int(h.job.run_at.timestamp() * 1000))
    assert {engine.inspect("emails", h.id).place for h in kept} == {"pending"}
    assert r.run_all(grace_seconds=0) == 0  # idempotent


def test_cancel_and_reschedule_on_two_nodes(cluster_settings) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    kept = {q: schedule("tests.jobs.noop", delay=3600, queue=q) for q in SPREAD}
    dropped = {q: schedule("tests.jobs.noop", delay=3600, queue=q) for q in SPREAD}
    with running_worker():
        for queue in SPREAD:
            assert cancel(dropped[queue].id) is CancelOutcome.CANCELLED
            reschedule(kept[queue].id, delay=timedelta(milliseconds=300))
        wait_until(lambda: all(h.status == JobStatus.SUCCEEDED for h in kept.values()))
    for queue in SPREAD:
        assert dropped[queue].status == JobStatus.CANCELLED
        assert engine.inspect(queue, dropped[queue].id).place == ""
