"""A Redis Cluster node that stalls (SIGSTOPped: it accepts connections, never answers)
costs one reply timeout (5 s), then counts as down until it answers again
(engine/stalls.py): a worker's queues on the other nodes go on, ``schedule()`` into it
keeps its rows in the outbox after one timeout and they run once it answers, keyless
calls leave it, and redis-py's redirections (MOVED in a MULTI after a slot moved) are
still followed."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
import redis
from redis.crc import key_slot

from django_delayq import schedule
from django_delayq.core.connection import get_engine, make_client
from django_delayq.models import Job, JobStatus
from tests.cluster.conftest import SPREAD, listening_worker, running_worker
from tests.helpers import wait_until

if TYPE_CHECKING:
    from tests.cluster.server import LocalCluster

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


@contextmanager
def stalled(cluster: LocalCluster, port: int) -> Iterator[None]:
    """Node ``port`` SIGSTOPped for the block, SIGCONTed after, whatever happens."""
    proc = cluster.node(port).proc
    assert proc is not None
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


def test_a_worker_serves_its_other_queues_while_a_node_stalls(  # type: ignore[no-untyped-def]
        cluster_settings, redis_cluster: LocalCluster) -> None:
    """The worker's claim of the stalled node's queue costs its loop one reply timeout;
    the queues of the other nodes go on (before: each call on the node took redis-py's 10
    retries of 5 s, and the loop started nothing for the whole stall)."""
    engine = get_engine()
    port = redis_cluster.node_of(engine.keys("slow").pending)
    others = [q for q in SPREAD if q != "slow"]
    with running_worker():
        due = {s: [schedule("tests.jobs.noop", queue=q, delay=timedelta(seconds=s))
                   for q in others] for s in (1, 4, 8, 12, 16)}
        handles = [h for hs in due.values() for h in hs]
        with stalled(redis_cluster, port):
            wait_until(lambda: Job.objects.filter(
                pk__in=[h.id for h in handles], status=JobStatus.SUCCEEDED
            ).count() == len(handles), timeout=40)
            late = {s: max(h.job.lateness_ms() or 0 for h in hs) for s, hs in due.items()}
        assert max(late.values()) < 10_000, late  # one timeout (5 s), not 55 s
        assert late[12] < 3000 and late[16] < 3000, late  # the node set aside: on time


def _listens(cluster: LocalCluster, port: int, channel: str) -> bool:
    """Whether a connection is subscribed to ``channel`` on node ``port``."""
    numsub = cluster.node(port).client().pubsub_numsub(channel)
    return bool(dict(numsub).get(channel.encode(), 0))


def test_the_wake_subscription_leaves_a_stalled_node(  # type: ignore[no-untyped-def]
        cluster_settings, redis_cluster: LocalCluster) -> None:
    """A subscription on a stalled node hears nothing. Once a call of the worker's met the
    stall (the reconciler reads every queue's epoch each second), the listener subscribes
    on another node, and jobs due soon on the other queues start on their wake message
    (the poll is 60 s here)."""
    engine = get_engine()
    with listening_worker(cluster_settings, redis_cluster) as (channel, listening):
        others = [n.port for n in redis_cluster.nodes if n.port != listening]
        with stalled(redis_cluster, listening):
            wait_until(lambda: any(_listens(redis_cluster, p, channel) for p in others),
                       timeout=30)
            for queue in SPREAD:
                if redis_cluster.node_of(engine.keys(queue).pending) != listening:
                    h = schedule("tests.jobs.noop", queue=queue,
                                 delay=timedelta(milliseconds=500))
                    wait_until(lambda: h.status == JobStatus.SUCCEEDED, timeout=15)  # noqa: B023
                    assert (h.job.lateness_ms() or 0) < 3000, queue


def test_schedule_into_a_stalled_node_waits_one_timeout_and_its_jobs_run_once(  # type: ignore[no-untyped-def]
        cluster_settings, redis_cluster: LocalCluster, start_worker, tmp_path) -> None:
    """``schedule()`` into a queue of the stalled node: the first call waits one reply
    timeout, the next ones return at once; the rows stay in the outbox and each job runs
    once after the node answers again (a worker process, whose own calls met the stall)."""
    engine = get_engine()
    port = redis_cluster.node_of(engine.keys("slow").pending)
    out = tmp_path / "runs.txt"
    proc = start_worker("--queues", ",".join(SPREAD), "--concurrency", "2")
    first = schedule("tests.jobs.record", str(out), "before", queue="slow")
    wait_until(lambda: first.status == JobStatus.SUCCEEDED, timeout=30)
    handles = []
    with stalled(redis_cluster, port):
        for i in range(5):
            began = time.monotonic()
            handles.append(schedule("tests.jobs.record", str(out), "s%d" % i, queue="slow"))
            took = time.monotonic() - began
            assert took < (10 if i == 0 else 2), (i, took)  # one 5 s timeout, then at once
        assert all(h.status == JobStatus.SCHEDULED for h in handles)  # in the outbox
        # until the worker's own calls met the stall and its queue there backed off a
        # while: its reconciler saw the outage, and looks at the rows changed during it
        # once the node answers (not after RECONCILE_GRACE_SECONDS)
        log = tmp_path / "worker-0.log"
        wait_until(lambda: "is retried in 1.6s" in log.read_text(), timeout=40)
        assert proc.poll() is None
    wait_until(lambda: Job.objects.filter(pk__in=[h.id for h in handles],
                                          status=JobStatus.SUCCEEDED).count() == 5, timeout=40)
    runs = sorted(line.split()[0] for line in out.read_text().splitlines())
    assert runs == ["before", "s0", "s1", "s2", "s3", "s4"], runs  # each once


def test_keyless_calls_leave_a_stalled_default_node(redis_cluster: LocalCluster) -> None:
    """TIME and PING go to the client's default node, XREAD asks it for its keys. When it
    stalls they move to another primary after one timeout, and stay there although every
    refresh of the slots (which every failing call makes) puts the first primary back."""
    client = make_client(redis_cluster.url)
    try:
        client.nodes_manager.initialize()
        default = client.get_default_node()  # the first primary, where a refresh puts it
        stream = next("{s%d}:events" % i for i in range(100)
                      if redis_cluster.node_of("{s%d}:events" % i) != default.port)
        with stalled(redis_cluster, default.port):
            began = time.monotonic()
            client.time()
            assert time.monotonic() - began < 10  # one reply timeout, then another node
            for _ in range(5):
                client.nodes_manager.initialize()
                began = time.monotonic()
                client.time()
                client.ping()
                client.xread({stream: "0-0"}, count=1)
                took = time.monotonic() - began
                assert took < 2, took
            assert client.get_default_node().port != default.port
    finally:
        client.close()


def _node_ids(cluster: LocalCluster) -> dict[int, str]:
    """Port -> cluster node id."""
    ids = {}
    for node in cluster.nodes:
        known = node.client().cluster("nodes")  # address -> what CLUSTER NODES says
        ids[node.port] = next(n["node_id"] for n in known.values() if "myself" in n["flags"])
    return ids


def _move_slot(cluster: LocalCluster, slot: int, source: int, target: int) -> None:
    """Migrate ``slot`` with its keys from node ``source`` to node ``target`` (ports), and
    tell every node."""
    ids = _node_ids(cluster)
    src, dst = cluster.node(source).client(), cluster.node(target).client()
    dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", ids[source])
    src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", ids[target])
    while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
        src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
    for port in [target, source] + [n.port for n in cluster.nodes if n.port not in
                                    (source, target)]:
        cluster.node(port).client().execute_command("CLUSTER SETSLOT", slot, "NODE", ids[target])
    cluster.wait_ok()


def test_a_multi_follows_moved_after_its_slot_moved(redis_cluster: LocalCluster) -> None:
    """The client keeps redis-py's redirections: a MULTI/EXEC sent to the node a slot left
    is answered MOVED and sent again to its new node (a client without retries failed)."""
    key = "{stall-moved}:k"
    slot = key_slot(key.encode())
    source = redis_cluster.node_of(key)
    target = next(n.port for n in redis_cluster.nodes if n.port != source)
    client = make_client(redis_cluster.url)
    try:
        client.set(key, "a")
        _move_slot(redis_cluster, slot, source, target)
        try:
            pipe = client.pipeline(transaction=True)
            pipe.append(key, "b")
            pipe.get(key)
            assert pipe.execute() == [2, b"ab"]
            assert client.get_node_from_key(key).port == target
        finally:
            _move_slot(redis_cluster, slot, target, source)
        assert client.get(key) == b"ab"  # a command follows MOVED (back) too
    finally:
        client.delete(key)
        client.close()


def _key_on(cluster: LocalCluster, port: int, tag: str) -> str:
    return next("{%s%d}:k" % (tag, i) for i in range(10_000)
                if cluster.node_of("{%s%d}:k" % (tag, i)) == port)


def test_a_client_built_while_a_node_stalls_lifts_its_mark(  # type: ignore[no-untyped-def]
        redis_cluster: LocalCluster, monkeypatch) -> None:
    """redis-py asks its startup nodes for the slots in a random order; the stalled one
    asked first (forced here) is marked before the client has its slot map. The mark is
    lifted once the node answers (before, its probe died and the client was refused the
    node for good)."""
    port = redis_cluster.nodes[1].port
    name, key = "127.0.0.1:%d" % port, _key_on(redis_cluster, port, "built")
    monkeypatch.setattr(random, "shuffle", lambda nodes: nodes.sort(
        key=lambda n: getattr(n, "port", 0) != port))
    with stalled(redis_cluster, port):
        client = make_client(redis_cluster.url, socket_timeout=1.0)
        assert client.stalls.stalled(name)  # met by the refresh inside its constructor
    monkeypatch.undo()
    try:
        wait_until(lambda: not client.stalls.stalled(name), timeout=20)
        client.set(key, "x")
        assert client.get(key) == b"x"
    finally:
        client.delete(key)
        client.close()


def _slots_asked(cluster: LocalCluster, but: int) -> int:
    """CLUSTER SLOTS calls the nodes other than ``but`` answered so far."""
    total = 0
    for node in cluster.nodes:
        if node.port != but:
            stats = node.client().info("commandstats")
            total += (stats.get("cmdstat_cluster|slots") or stats.get("cmdstat_cluster")
                      or {}).get("calls", 0)
    return total


def test_calls_on_a_stalled_node_refresh_the_slots_once_a_second(
        redis_cluster: LocalCluster) -> None:
    """Every call that meets a marked node refreshes the client's slot map (a replica
    promoted meanwhile is followed, tests/cluster/test_stall_failover.py), one a second
    at most: a pipeline no longer sends itself again 10 times with a refresh each, and a
    GET's refresh is not repeated at each call (before: 120 CLUSTER SLOTS here)."""
    port = redis_cluster.nodes[2].port
    key, other = _key_on(redis_cluster, port, "rf"), _key_on(redis_cluster,
                                                             redis_cluster.nodes[0].port, "rf")
    client = make_client(redis_cluster.url, socket_timeout=1.0)

    def pipeline(transaction: bool) -> object:
        pipe = client.pipeline(transaction=transaction)
        pipe.get(key)
        if not transaction:
            pipe.get(other)
        return pipe.execute()

    try:
        client.set(key, "1")
        with stalled(redis_cluster, port):
            with pytest.raises(redis.ConnectionError):
                client.get(key)  # one reply timeout: marked
            before, began = _slots_asked(redis_cluster, port), time.monotonic()
            for _ in range(10):
                for call in (lambda: client.get(key), lambda: pipeline(False),
                             lambda: pipeline(True)):
                    with pytest.raises(redis.ConnectionError):
                        call()
                assert client.get(other) is None
            took = time.monotonic() - began
            asked = _slots_asked(redis_cluster, port) - before
        assert took < 5, took  # each at once
        assert asked <= 2 + took, (asked, took)
    finally:
        wait_until(lambda: not client.stalls.stalled("127.0.0.1:%d" % port), timeout=20)
        client.delete(key)
        client.close()
