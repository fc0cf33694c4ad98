"""A sharded queue on a real local Redis Cluster: the three shards of one logical queue
live on three different nodes, and a real ``delayq_worker`` process drains the queue
completely, every job run once."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import Popen
from typing import TYPE_CHECKING

import pytest

from django_delayq import schedule
from django_delayq.core.connection import get_engine
from django_delayq.engine.engine import Engine as OneDataSet
from django_delayq.engine.shard_map import shard_name
from django_delayq.models import Job, JobStatus
from tests.cluster.conftest import spread_prefix
from tests.core.test_shards_settings import SHARDS
from tests.helpers import wait_until
from tests.worker.conftest import worker_starter

if TYPE_CHECKING:
    from tests.cluster.server import LocalCluster

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]
NAMES = tuple(shard_name("emails", i) for i in range(SHARDS))


@pytest.fixture
def sharded_cluster(settings, redis_cluster: LocalCluster):  # type: ignore[no-untyped-def]
    """DELAYQ on the cluster, ``emails`` in three shards, under a prefix that puts each
    shard on a different node."""
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_cluster.url,
                       "PREFIX": spread_prefix(redis_cluster, NAMES),
                       "QUEUE_OPTIONS": {"emails": {"shards": SHARDS}}}
    return settings


@pytest.fixture
def start_worker(sharded_cluster, tmp_path) -> Iterator[Callable[..., Popen[str]]]:  # type: ignore[no-untyped-def]
    yield from worker_starter(sharded_cluster, tmp_path, "tests.core.test_shards_settings")


def test_shards_live_on_different_nodes_and_a_worker_drains_them_all(  # type: ignore[no-untyped-def]
        sharded_cluster, start_worker, tmp_path: Path) -> None:
    engine = get_engine()
    out = tmp_path / "runs.txt"
    tags = ["j%d" % i for i in range(150)]
    for tag in tags:
        schedule("tests.jobs.record", str(out), tag, queue="emails")
    owners = {engine.client.get_node_from_key(engine.keys(name).pending).name
              for name in NAMES}
    assert len(owners) == SHARDS  # the cluster's own view: one shard per node
    held = [OneDataSet.stats(engine, name).ready for name in NAMES]
    assert sum(held) == 150 and min(held) > 0, held  # every node holds a share
    proc = start_worker("--queues", "emails", "--concurrency", "4")
    try:
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 150,
                   timeout=120)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    runs = [line.split()[0] for line in out.read_text().splitlines()]
    assert sorted(runs) == sorted(tags)  # every job once
    stats = engine.stats("emails")
    assert (stats.ready, stats.scheduled, stats.inflight, stats.dead) == (0, 0, 0, 0)
