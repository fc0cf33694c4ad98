"""A node of a sharded queue stalls (SIGSTOP: connections accepted, no answer) while web
threads schedule into the queue. The sends that failed, and those their process skips
while it backs off the shard, stay in the outbox. The node resumes while that backoff is
at its longest (5 s), so the web threads leave rows in the outbox after the worker saw
the node answer again: every job runs, each once, within seconds of the resume, not
after ``RECONCILE_GRACE_SECONDS`` (the worker's reconciler looks again until no web
process can still be backing off)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.db import connections

from django_delayq import schedule
from django_delayq.core.connection import get_engine
from django_delayq.engine.shard_map import shard_name
from django_delayq.models import Job, JobStatus
from tests.cluster.conftest import spread_prefix
from tests.helpers import wait_until
from tests.worker.conftest import worker_starter

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from subprocess import Popen

    from tests.cluster.server import LocalCluster

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]
NAMES = tuple(shard_name("emails", i) for i in range(3))
WEB_THREADS = 4


@pytest.fixture
def stalling(settings, redis_cluster: LocalCluster):  # type: ignore[no-untyped-def]
    """A 3-shard queue; replies awaited 1 s (a stalled node is found sooner)."""
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_cluster.url + "?socket_timeout=1",
                       "PREFIX": spread_prefix(redis_cluster, NAMES),
                       "QUEUE_OPTIONS": {"emails": {"shards": len(NAMES)}}}
    return settings


@pytest.fixture
def start_worker(stalling, tmp_path: Path, monkeypatch) -> Iterator[Callable[..., Popen[str]]]:  # type: ignore[no-untyped-def]
    """Workers of 3 shards whose grace pass never comes within the test."""
    (tmp_path / "stall_settings.py").write_text(
        "from tests.core.test_shards_settings import *  # noqa: F403\n"
        "DELAYQ = {**DELAYQ, 'RECONCILE_GRACE_SECONDS': 3600}  # noqa: F405\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p))
    yield from worker_starter(stalling, tmp_path, "stall_settings")


def test_the_outbox_of_a_stalled_node_drains_within_seconds_once_it_answers(  # type: ignore[no-untyped-def]
        redis_cluster: LocalCluster, start_worker, tmp_path: Path) -> None:
    engine = get_engine()
    out = tmp_path / "runs.txt"
    worker = start_worker("--queues", "emails", "--concurrency", "4")
    first = [schedule("tests.jobs.record", str(out), "first-%d" % i, queue="emails")
             for i in range(6)]
    wait_until(lambda: all(h.status == JobStatus.SUCCEEDED for h in first), timeout=60)
    node = redis_cluster.node(redis_cluster.node_of(engine.keys(NAMES[2]).pending))
    assert node.proc is not None
    tags: list[str] = []
    stop = threading.Event()

    def web(n: int) -> None:  # a web process's threads, scheduling on
        try:
            while not stop.is_set():
                tags.append("w%d-%d" % (n, len(tags)))
                schedule("tests.jobs.record", str(out), tags[-1], queue="emails")
                stop.wait(0.05)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=web, args=(n,)) for n in range(WEB_THREADS)]
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        for thread in threads:
            thread.start()
        # until sends into the stalled shard have failed, round after round, until the
        # process backs off the shard for the longest (5 s), skipping the sends meanwhile
        try:
            wait_until(lambda: engine.health.remaining_ms(NAMES[2]) > 4000, timeout=120,
                       step=0.05)
        finally:
            os.kill(node.proc.pid, signal.SIGCONT)
        back = time.monotonic()
        # the web threads go on while this process still backs off the shard
        wait_until(lambda: not engine.health.down(NAMES[2]), timeout=30, step=0.1)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    total = len(first) + len(tags)
    wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == total,
               timeout=60, step=0.2)
    took = time.monotonic() - back
    assert took < 40, took  # the grace pass would take 3600 s here (60 s by default)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    runs = Counter(line.split()[0] for line in out.read_text().splitlines())
    assert sorted(runs) == sorted(["first-%d" % i for i in range(6)] + tags)
    assert set(runs.values()) == {1}, [t for t, n in runs.items() if n > 1]
