"""A master, a replica and three sentinels (``redis-server --sentinel``) of the test's own,
on free ports in temporary directories.

Everyone reaches the master through a ``ReplicationCut`` proxy (the sentinels monitor the
proxy's address, the replica replicates from it), so the replica's view of its master
matches the sentinels' and they leave it alone; ``cut()`` stops the replication stream
only, so that writes the master acknowledges from then on never reach the replica: what
asynchronous replication loses when the master dies at that moment.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.helpers import wait_until
from tests.redis_server import RedisServer, binaries, free_port

SERVICE = "mymaster"
DOWN_AFTER_MS = 1000  # sentinels call the master down after 1 s without an answer


class ReplicationCut:
    """A TCP proxy to ``target_port``; after ``cut()`` it drops what the master sends on
    connections that asked for replication (SYNC/PSYNC), and nothing else."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.cutting = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self.cutting.set()

    def close(self) -> None:
        self.closed = True
        self.listener.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), 2)
                upstream.settimeout(None)
            except OSError:
                client.close()  # the master is gone: refuse like it would
                continue
            replication = threading.Event()
            threading.Thread(target=self._pipe, args=(client, upstream, replication, True),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, replication, False),
                             daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, replication: threading.Event,
              from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                # the command's name as a bulk string of its own, not text that holds the
                # word (a script's source sent by EVAL or SCRIPT LOAD)
                if from_client and (b"\r\nSYNC\r\n" in data.upper()
                                    or b"\r\nPSYNC\r\n" in data.upper()):
                    replication.set()
                if not from_client and replication.is_set() and self.cutting.is_set():
                    continue  # the replica never hears of it
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


@dataclass
class SentinelSet:
    binary: str = field(default_factory=lambda: binaries()[0])
    master: RedisServer | None = None
    replica: RedisServer | None = None
    proxy: ReplicationCut | None = None
    sentinels: list[subprocess.Popen[bytes]] = field(default_factory=list)
    sentinel_ports: list[int] = field(default_factory=list)
    dir: str = ""

    @property
    def url(self) -> str:
        hosts = ",".join("127.0.0.1:%d" % p for p in self.sentinel_ports)
        return "redis+sentinel://%s/%s/0" % (hosts, SERVICE)

    def start(self) -> SentinelSet:
        self.dir = tempfile.mkdtemp(prefix="delayq-sentinel-")
        self.master = RedisServer(self.binary).start()
        self.proxy = ReplicationCut(self.master.port)
        self.replica = RedisServer(self.binary, extra=[
            "--replicaof", "127.0.0.1", str(self.proxy.port)]).start()
        wait_until(self._replica_in_sync, timeout=30)
        for i in range(3):
            self._start_sentinel(i)
        wait_until(self._sentinels_ready, timeout=60, step=0.1)
        return self

    def _start_sentinel(self, i: int) -> None:
        port = free_port()
        conf = Path(self.dir) / ("sentinel-%d.conf" % i)
        conf.write_text("\n".join([
            "port %d" % port, "bind 127.0.0.1", "dir %s" % self.dir,
            "sentinel monitor %s 127.0.0.1 %d 2" % (SERVICE, self.proxy_port),
            "sentinel down-after-milliseconds %s %d" % (SERVICE, DOWN_AFTER_MS),
            "sentinel failover-timeout %s 10000" % SERVICE, ""]))
        self.sentinels.append(subprocess.Popen(
            [self.binary, str(conf), "--sentinel", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.sentinel_ports.append(port)

    @property
    def proxy_port(self) -> int:
        assert self.proxy is not None
        return self.proxy.port

    def sentinel(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2,
                           decode_responses=True)

    def _replica_in_sync(self) -> bool:
        assert self.replica is not None
        info = self.replica.client().info("replication")
        return bool(info.get("master_link_status") == "up")

    def _sentinels_ready(self) -> bool:
        """Each sentinel knows the replica and the two other sentinels: a failover can
        get its quorum and has somewhere to go."""
        try:
            for port in self.sentinel_ports:
                m = self.sentinel(port).sentinel_master(SERVICE)
                if int(m["num-slaves"]) < 1 or int(m["num-other-sentinels"]) < 2:
                    return False
        except redis.ConnectionError:
            return False
        return True

    def master_port(self) -> int | None:
        """The master the sentinels agree on (every one of them), or None."""
        seen = set()
        for port in self.sentinel_ports:
            try:
                addr = self.sentinel(port).sentinel_get_master_addr_by_name(SERVICE)
            except redis.ConnectionError:
                return None
            seen.add(int(addr[1]) if addr else None)
        return seen.pop() if len(seen) == 1 else None

    def kill_master(self) -> None:
        assert self.master is not None and self.master.proc is not None
        self.master.proc.send_signal(signal.SIGKILL)
        self.master.proc.wait()

    def promoted(self) -> bool:
        """The replica is the master now, for every sentinel and for itself."""
        assert self.replica is not None
        if self.master_port() != self.replica.port:
            return False
        return bool(self.replica.client().info("replication")["role"] == "master")

    def cleanup(self) -> None:
        for proc in self.sentinels:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if self.proxy is not None:
            self.proxy.close()
        for server in (self.master, self.replica):
            if server is not None:
                server.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)
