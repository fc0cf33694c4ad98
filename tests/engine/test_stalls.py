"""engine/stalls.py on its own: a connection whose reply times out marks its node, every
call on the node then fails at once, a probe's answered PING lifts the mark; the retry
of a MULTI still retries redirections; a TLS URL keeps TLS. Against one SIGSTOPped
redis-server (the cluster's: tests/cluster/test_stall.py)."""

from __future__ import annotations

import logging
import os
import signal
import threading
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
    stalls = NodeStalls()
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


def _mark(stalls: NodeStalls, server: RedisServer) -> None:
    """Stop ``server`` (the caller SIGCONTs it) and mark it in ``stalls``: a guarded
    connection's reply timed out."""
    conn = guarded(Connection, stalls)(host="127.0.0.1", port=server.port, socket_timeout=0.5)
    conn.connect()
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    conn.send_command("PING")
    with pytest.raises(RedisTimeoutError):
        conn.read_response()


def test_a_probe_outlives_a_failure_of_its_own(server: RedisServer) -> None:
    """The probe's look at its client failing (the client still being built: no
    ``nodes_manager`` yet) or a connection it cannot make does not end it: the mark is
    lifted once the node answers (before, the probe's thread died and the mark stayed)."""
    name = "127.0.0.1:%d" % server.port
    looks: list[int] = []

    def owns(node: str) -> bool:
        looks.append(1)
        if len(looks) < 3:
            raise AttributeError("'StallAwareCluster' object has no attribute 'nodes_manager'")
        return True

    stalls = NodeStalls(owns)
    assert server.proc is not None
    try:
        _mark(stalls, server)
        assert stalls.stalled(name)
        wait_until(lambda: len(looks) >= 3, timeout=10)
    finally:
        server.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: not stalls.stalled(name), timeout=15)
    stalls.close()


def test_a_forked_child_has_no_marks(server: RedisServer) -> None:
    """Marks belong to the process that made them: the child of a fork has no probe
    thread to lift them (before, it was refused its parent's stalled node for good)."""
    name = "127.0.0.1:%d" % server.port
    stalls = NodeStalls()
    assert server.proc is not None
    try:
        _mark(stalls, server)
        pid = os.fork()
        if pid == 0:  # the child: its answer is its exit code
            os._exit(0 if not stalls.stalled(name) else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert stalls.stalled(name)  # the parent's mark stays, with its probe
    finally:
        server.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: not stalls.stalled(name), timeout=15)
    stalls.close()


def test_a_stall_is_logged_once_per_process(server: RedisServer,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """Two clients (two ``NodeStalls``) whose threads meet the same stall together: one
    "did not answer" line, one "answers again" line."""
    name = "127.0.0.1:%d" % server.port
    clients = [NodeStalls(), NodeStalls()]
    caplog.set_level(logging.WARNING, logger="django_delayq.engine.stalls")
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    try:
        start = threading.Barrier(8)

        def meet(stalls: NodeStalls) -> None:
            start.wait()
            stalls.timed_out(name, RedisTimeoutError("Timeout reading from socket"),
                             lambda: Connection(host="127.0.0.1", port=server.port))

        threads = [threading.Thread(target=meet, args=(clients[i % 2],)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert all(s.stalled(name) for s in clients)
    finally:
        server.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: not any(s.stalled(name) for s in clients), timeout=15)
    wait_until(lambda: any("answers again" in r.getMessage() for r in caplog.records))
    said = [r.getMessage() for r in caplog.records]
    assert sum("did not answer" in m for m in said) == 1, said
    assert sum("answers again" in m for m in said) == 1, said
    for stalls in clients:
        stalls.close()


def test_a_node_that_left_the_slot_map_has_its_mark_dropped_and_said(
        caplog: pytest.LogCaptureFixture) -> None:
    """A stalled master replaced by its replica leaves the slot map: its mark and probe
    end, and the log says so (before: no line after "did not answer")."""
    stalls = NodeStalls(lambda node: False)
    caplog.set_level(logging.WARNING, logger="django_delayq.engine.stalls")
    stalls.timed_out("10.9.9.9:7000", RedisTimeoutError("Timeout reading from socket"),
                     lambda: Connection(host="10.9.9.9", port=7000))
    wait_until(lambda: any("10.9.9.9:7000 is no longer in the cluster's slot map" in
                           r.getMessage() for r in caplog.records), timeout=10)
    assert not stalls.stalled("10.9.9.9:7000")
    stalls.close()


def test_a_stall_met_again_after_its_clients_closed_is_the_same_stall(
        server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    """A client meets the stall and is closed, its probe ends (a worker's system checks'
    client), then another client meets it: one "did not answer" line, and "answers
    again" counts from the first."""
    name = "127.0.0.1:%d" % server.port
    caplog.set_level(logging.WARNING, logger="django_delayq.engine.stalls")
    first, second = NodeStalls(), NodeStalls()
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    try:
        met = time.monotonic()
        for stalls in (first, second):
            stalls.timed_out(name, RedisTimeoutError("Timeout reading from socket"),
                             lambda: Connection(host="127.0.0.1", port=server.port))
            assert stalls.stalled(name)
            if stalls is first:
                first.close()
                wait_until(lambda: not first.stalled(name), timeout=15)
        later = time.monotonic() - met
    finally:
        server.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: not second.stalled(name), timeout=15)
    wait_until(lambda: any("answers again" in r.getMessage() for r in caplog.records))
    said = [r.getMessage() for r in caplog.records]
    assert sum("did not answer" in m for m in said) == 1, said
    again = next(m for m in said if "answers again" in m)
    assert float(again.split("after ")[1].rstrip("s)")) >= round(later, 1), (again, later)
    second.close()
