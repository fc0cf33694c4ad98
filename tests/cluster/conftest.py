"""Fixtures of the cluster tests: DELAYQ pointed at the session's local Redis Cluster,
under a prefix that puts each of the three queues on a different node."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

from django_delayq.worker.loop import Worker, WorkerOptions
from tests.conftest import unique_prefix
from tests.helpers import wait_until
from tests.worker import conftest as worker

if TYPE_CHECKING:
    from tests.cluster.server import LocalCluster

SPREAD = ("default", "emails", "slow")  # tests.settings' QUEUES: one per node


def spread_prefix(cluster: LocalCluster, queues: tuple[str, ...] = SPREAD) -> str:
    """A fresh prefix under which ``queues`` hash to distinct cluster nodes."""
    for _ in range(100):
        prefix = unique_prefix()
        nodes = {cluster.node_of("{%s:%s}" % (prefix, q)) for q in queues}
        if len(nodes) == len(queues):
            return prefix
    raise RuntimeError("no prefix spreads %r over the cluster" % (queues,))


def grouped_prefix(cluster: LocalCluster, together: tuple[str, ...], apart: str) -> str:
    """A fresh prefix under which the ``together`` queues share a node, ``apart``'s
    another."""
    for _ in range(300):
        prefix = unique_prefix()
        nodes = {cluster.node_of("{%s:%s}" % (prefix, q)) for q in together}
        if len(nodes) == 1 and cluster.node_of("{%s:%s}" % (prefix, apart)) not in nodes:
            return prefix
    raise RuntimeError("no prefix puts %r on one node and %r on another" % (together, apart))


@pytest.fixture
def cluster_settings(settings, redis_cluster: LocalCluster):  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_cluster.url,
                       "PREFIX": spread_prefix(redis_cluster)}
    return settings


@pytest.fixture
def start_worker(cluster_settings, tmp_path) -> Iterator[Callable[..., subprocess.Popen[str]]]:  # type: ignore[no-untyped-def]
    yield from worker.worker_starter(cluster_settings, tmp_path)


@contextmanager
def running_worker(queues: tuple[str, ...] = SPREAD, concurrency: int = 2) -> Iterator[Worker]:
    """A real ``Worker`` on a thread of this process; drained and joined on exit."""
    from django_delayq.core.conf import get_settings
    from django_delayq.core.connection import get_engine

    w = Worker(get_engine(), get_settings(), WorkerOptions(queues=queues, concurrency=concurrency))
    thread = threading.Thread(target=w.run, name="cluster-test-worker", daemon=True)
    thread.start()
    try:
        yield w
    finally:
        w.request_stop()
        thread.join(30)
        assert not thread.is_alive(), "the worker did not drain"


@contextmanager
def listening_worker(settings: Any, cluster: LocalCluster) -> Iterator[tuple[str, int]]:
    """A ``running_worker`` whose wake poll is 60 s (a job due soon starts on its wake
    message, or a minute late): yields the channel of ``default`` and the port of the
    node its subscription listens on."""
    from django_delayq.core.connection import get_engine

    settings.DELAYQ = {**settings.DELAYQ, "WAKE_INTERVAL_SECONDS": 60}
    channel = get_engine().keys("default").channel
    with running_worker():
        wait_until(lambda: bool(cluster.subscribed_at(channel)))
        [listening] = cluster.subscribed_at(channel)
        yield channel, listening
