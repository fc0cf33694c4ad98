"""A sharded queue on a real local Redis Cluster whose node of one shard is stalled
(SIGSTOP: its port still accepts connections, nothing answers): a call on that node
costs one reply timeout and raises, and the other shards go on meanwhile. redis-py's
default cluster retry ran such a call eleven times (55 s), and every shard waited."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest
import redis

from django_delayq import schedule
from django_delayq.core.connection import get_engine
from django_delayq.engine.client import SOCKET_TIMEOUT_SECONDS, make_client
from django_delayq.models import Job, JobStatus
from tests.cluster.conftest import running_worker
from tests.cluster.test_node_loss import NAMES, SHARDS, _kill, _placed
from tests.helpers import wait_until

if TYPE_CHECKING:
    from tests.cluster.server import LocalCluster

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]
STALLED = 2


@contextmanager
def _stopped(cluster: LocalCluster, port: int) -> Iterator[None]:
    """Node ``port`` stopped (SIGSTOP) for the block, then resumed and the cluster ok."""
    proc = cluster.node(port).proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        cluster.wait_ok(30)


def test_a_stalled_node_costs_one_reply_timeout_and_the_other_shards_go_on(  # type: ignore[no-untyped-def]
        settings, redis_cluster: LocalCluster, tmp_path) -> None:
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_cluster.url,
                       "PREFIX": _placed(redis_cluster, STALLED),
                       "QUEUE_OPTIONS": {"emails": {"shards": SHARDS}}}
    engine = get_engine()
    stalled = redis_cluster.node_of(engine.keys(NAMES[STALLED]).pending)
    out = tmp_path / "runs.txt"
    with running_worker(("emails",), concurrency=4):
        schedule("tests.jobs.record", str(out), "warm", queue="emails")
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 1, 20)
        with _stopped(redis_cluster, stalled):
            began = time.monotonic()
            with pytest.raises(redis.TimeoutError):  # the client itself: no ShardHealth
                engine.client.zcard(engine.keys(NAMES[STALLED]).pending)
            took = time.monotonic() - began
            # one reply timeout and some slack for a loaded machine (it was 55 s)
            assert SOCKET_TIMEOUT_SECONDS - 0.5 < took < 12, took
            handles, healthy_took = [], []
            for i in range(30):
                began = time.monotonic()
                handle = schedule("tests.jobs.record", str(out), "s%d" % i, queue="emails")
                if engine.home_of("emails", handle.id) != NAMES[STALLED]:
                    healthy_took.append(time.monotonic() - began)
                handles.append(handle)
            assert healthy_took and max(healthy_took) < 3, healthy_took
            healthy = [h.id for h in handles if engine.home_of("emails", h.id) != NAMES[STALLED]]
            # the worker starts the other shards' jobs while the node is still stopped
            wait_until(lambda: Job.objects.filter(
                pk__in=healthy, status=JobStatus.SUCCEEDED).count() == len(healthy), 25)


def test_a_keyless_command_leaves_a_dead_default_node(redis_cluster: LocalCluster) -> None:
    """One try per call, yet TIME (keyless: the default node's) answers while the default
    node is down: redis-py moved the default node away from a dead one only on a retry."""
    client = make_client(redis_cluster.url)
    victim = redis_cluster.nodes[0].port
    try:
        assert client.set_default_node(client.get_node("127.0.0.1", victim))
        _kill(redis_cluster, victim)
        assert client.time()
        assert client.get_default_node().port != victim
    finally:
        client.close()
        redis_cluster.restart(victim)
