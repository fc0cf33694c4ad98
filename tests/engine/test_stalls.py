"""engine/stalls.py on its own: a connection whose reply times out marks its node, every
call on the node then fails at once, a probe's answered PING lifts the mark; the retry
of a MULTI still retries redirections; a TLS URL keeps TLS. Against one SIGSTOPped
redis-server (the cluster's: tests/cluster/test_stall.py)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import Connection, SSLConnection
from redis.exceptions import MovedError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_delayq.engine.stalls import (
    NodeStalled,
    NodeStalls,
    StallAwareCluster,
    StallGuard,
    StallRetry,
    guarded,
)
from tests.helpers import wait_until
from tests.redis_server import RedisServer, binaries


@pytest.fixture
def server() -> Iterator[RedisServer]:
    started = RedisServer(binaries()[0]).start()
    yield started
    if started.proc is not None:
        started.proc.send_signal(signal.SIGCONT)
    started.cleanup()


def test_a_reply_timeout_marks_the_node_until_it_answers_a_probe(server: RedisServer) -> None:
    name = "127.0.0.1:%d" % server.port
    stalls = NodeStalls(lambda node: Connection(host="127.0.0.1", port=server.port,
                                                socket_timeout=0.5))
    conn = guarded(Connection, stalls)(host="127.0.0.1", port=server.port, socket_timeout=0.5)
    conn.connect()
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    try:
        conn.send_command("PING")
        with pytest.raises(RedisTimeoutError):
            conn.read_response(timeout=0.1, disconnect_on_error=False)  # a wait chosen: no mark
        assert not stalls.stalled(name)
        with pytest.raises(RedisTimeoutError):
            conn.read_response()  # the reply timeout
        assert stalls.stalled(name)
        began = time.monotonic()
        for call in (lambda: conn.send_command("PING"), conn.connect):
            with pytest.raises(NodeStalled):
                call()
        assert time.monotonic() - began < 0.2  # at once, not one more timeout
    finally:
        server.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: not stalls.stalled(name), timeout=10)  # the probe's PING answered
    conn.send_command("PING")
    assert conn.read_response() == b"PONG"
    stalls.close()


def test_the_retry_follows_redirections_but_never_a_stalled_node() -> None:
    retry = StallRetry(NoBackoff(), retries=3)
    retry.update_supported_errors([MovedError])
    for error, calls_made in ((MovedError("1 127.0.0.1:1"), 4), (NodeStalled("x"), 1)):
        calls: list[Exception] = []

        def fail(exc: Exception = error, made: list[Exception] = calls) -> None:
            made.append(exc)
            raise exc

        with pytest.raises(type(error)):
            retry.call_with_retry(fail, lambda exc: None)
        assert len(calls) == calls_made, error


def test_a_tls_url_keeps_tls_under_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    monkeypatch.setattr(RedisCluster, "__init__", lambda self, **kw: seen.update(kw))
    StallAwareCluster(url="rediss://:pw@h:7000/?ssl_cert_reqs=none")
    assert seen["url"] == "redis://:pw@h:7000/?ssl_cert_reqs=none"  # else redis-py's class
    made = seen["connection_class"]
    assert isinstance(made, type) and issubclass(made, StallGuard)
    assert issubclass(made, SSLConnection) and isinstance(seen["retry"], StallRetry)
