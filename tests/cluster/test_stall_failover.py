"""A MULTI-only caller follows a failover while the old master stays stalled: a cluster
of its own (three masters, one with a replica), the master SIGSTOPped, its replica
promoted (``CLUSTER FAILOVER TAKEOVER``) once the client marked the master."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import redis

from django_delayq.core.connection import make_client
from tests.cluster.server import LocalCluster
from tests.cluster.test_stall import stalled
from tests.helpers import wait_until

if TYPE_CHECKING:
    from tests.redis_server import RedisServer


@pytest.fixture
def replicated() -> Iterator[tuple[LocalCluster, int, RedisServer]]:
    cluster = LocalCluster()
    try:
        cluster.start()
        master = cluster.nodes[0].port
        yield cluster, master, cluster.add_replica(master)
    finally:
        for node in cluster.nodes:
            if node.proc is not None:
                node.proc.send_signal(signal.SIGCONT)
        cluster.cleanup()


def _owner(node: RedisServer, key: str) -> int:
    """The port ``node``'s CLUSTER SLOTS gives as the master of ``key``'s slot."""
    slot = node.client().cluster("keyslot", key)
    return next(int(master[1]) for lo, hi, master, *_ in
                node.client().execute_command("CLUSTER SLOTS") if lo <= slot <= hi)


def test_a_multi_follows_the_replica_promoted_while_its_master_stalls(
        replicated: tuple[LocalCluster, int, RedisServer]) -> None:
    """Each MULTI that meets the marked master refreshes the slots (one a second at most),
    so one sent after the promotion reaches the new master (before: the MULTI never
    refreshed, and failed at once for as long as the old master stalled)."""
    cluster, master, replica = replicated
    key = next("{fo%d}:n" % i for i in range(10_000) if cluster.node_of("{fo%d}:n" % i) == master)
    client = make_client(cluster.url, socket_timeout=1.0)

    def multi() -> list[object]:
        pipe = client.pipeline(transaction=True)
        pipe.incr(key)
        pipe.get(key)
        return pipe.execute()  # type: ignore[no-any-return]

    def answered(results: list[list[object]]) -> bool:
        try:
            results.append(multi())
        except redis.ConnectionError:
            return False
        return True

    try:
        assert multi() == [1, b"1"]
        assert cluster.node(master).client().execute_command("WAIT", 1, 5000) == 1
        with stalled(cluster, master):
            with pytest.raises(redis.ConnectionError):
                multi()  # one reply timeout: the master is marked
            assert client.stalls.stalled("127.0.0.1:%d" % master)
            replica.client().execute_command("CLUSTER FAILOVER", "TAKEOVER")
            others = [n for n in cluster.nodes if n.port != master]
            wait_until(lambda: all(_owner(n, key) == replica.port for n in others),
                       timeout=20)
            results: list[list[object]] = []
            wait_until(lambda: answered(results), timeout=20, step=0.2)
            assert results == [[2, b"2"]]
    finally:
        client.close()
