"""A plain ``redis://`` URL that reaches a Sentinel, not the master it monitors: the
Sentinel answers PING but no GET, so this is a setting to fix (``delayq.E034``, exit 2),
never an outage to wait out. And a master reached through Sentinel that writes without a
replica in sync (``min-replicas-to-write 0``): ``delayq.W014``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from django_delayq.engine.client import make_client
from django_delayq.engine.server_mode import WrongRedisMode
from django_delayq.observe.checks import check_redis
from django_delayq.worker.loop import wait_for_redis
from tests.helpers import wait_until
from tests.redis_server import RedisServer, binaries, free_port
from tests.worker import conftest as worker

pytestmark = pytest.mark.django_db(transaction=True)


def _answers(port: int) -> bool:
    try:
        with redis.Redis(port=port, socket_timeout=2) as client:
            return bool(client.ping())
    except redis.ConnectionError:
        return False


def _start_sentinel(tmp_path: Path, master_port: int) -> tuple[subprocess.Popen[bytes], int]:
    """A sentinel of the test's own (quorum 1) on a free port, monitoring ``master_port``
    as ``mymaster``; it answers once started."""
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %d 1\n"
                    % (port, tmp_path, master_port))
    proc = subprocess.Popen([binaries()[0], str(conf), "--sentinel", "--loglevel", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _answers(port), timeout=30)
    except AssertionError:
        proc.kill()
        proc.wait()
        raise
    return proc, port


@pytest.fixture
def sentinel_url(settings, tmp_path: Path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """DELAYQ['REDIS_URL'] a plain URL of a Sentinel of the test's own."""
    proc, port = _start_sentinel(tmp_path, free_port())
    try:
        url = "redis://127.0.0.1:%d/0" % port
        settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": url}
        yield url
    finally:
        proc.kill()
        proc.wait()


def test_check_says_a_plain_url_names_a_sentinel(sentinel_url) -> None:  # type: ignore[no-untyped-def]
    [found] = check_redis()
    assert (found.id, found.obj) == ("delayq.E034", "DELAYQ['REDIS_URL']")
    assert "is a Sentinel" in found.msg and "redis+sentinel://" in found.msg


def test_the_worker_does_not_wait_on_a_sentinel(sentinel_url) -> None:  # type: ignore[no-untyped-def]
    from django_delayq.core.connection import get_engine

    asked: list[int] = []

    def orphaned() -> bool:  # ends the wait after 20 asks, were it an outage
        asked.append(1)
        return len(asked) > 20

    with pytest.raises(WrongRedisMode, match="is a Sentinel"):
        wait_for_redis(get_engine, orphaned=orphaned)


def test_delayq_worker_exits_2(settings, sentinel_url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    starter = worker.worker_starter(settings, tmp_path)
    start = next(starter)
    try:
        proc = start()
        assert worker.wait_or_dump(proc, 60) == 2
        log = worker.LOGS[proc.pid].read_text()
        assert "is a Sentinel" in log and "redis+sentinel://" in log
    finally:
        next(starter, None)


def test_check_warns_of_a_master_that_writes_without_a_replica(  # type: ignore[no-untyped-def]
        settings, tmp_path) -> None:
    master = RedisServer(binaries()[0]).start()
    proc, port = _start_sentinel(tmp_path, master.port)
    try:
        settings.DELAYQ = {**settings.DELAYQ,
                           "REDIS_URL": "redis+sentinel://127.0.0.1:%d/mymaster/0" % port}
        [found] = [m for m in check_redis() if m.id == "delayq.W014"]
        assert "min-replicas-to-write 0" in found.msg and "twice" in found.msg
        assert "min-replicas-max-lag" in found.hint
        master.client().config_set("min-replicas-to-write", "1")
        assert [m for m in check_redis() if m.id == "delayq.W014"] == []
    finally:
        proc.kill()
        proc.wait()
        master.cleanup()


def test_no_such_warning_for_a_plain_url(redis_server, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_server.url}
    assert [m for m in check_redis() if m.id == "delayq.W014"] == []


def test_a_master_refusing_writes_sends_the_client_to_the_sentinels_again(  # type: ignore[no-untyped-def]
        tmp_path) -> None:
    """NOREPLICAS (``min-replicas-to-write``, no replica in sync: an old master the sentinels
    have replaced but not yet demoted) drops the connection, as READONLY does: the next
    one asks the sentinels, which name the new master. Before, every command on the pooled
    connection was refused until the old master was demoted."""
    old = RedisServer(binaries()[0], extra=["--min-replicas-to-write", "1"]).start()
    new = RedisServer(binaries()[0]).start()
    proc, port = _start_sentinel(tmp_path, old.port)
    client = make_client("redis+sentinel://127.0.0.1:%d/mymaster/0" % port)
    try:
        assert client.ping()  # a pooled connection to the old master
        with redis.Redis(port=port, decode_responses=True) as sentinel:
            sentinel.sentinel_remove("mymaster")
            sentinel.sentinel_monitor("mymaster", "127.0.0.1", new.port, 1)
            assert int(sentinel.sentinel_get_master_addr_by_name("mymaster")[1]) == new.port
        wait_until(lambda: _written(client), timeout=15)
        assert new.client().get("k") == b"v" and old.client().get("k") is None
    finally:
        client.close()
        proc.kill()
        proc.wait()
        old.cleanup()
        new.cleanup()


def _written(client: redis.Redis) -> bool:
    try:
        return bool(client.set("k", "v"))
    except redis.ConnectionError:
        return False  # dropped: the next try asks the sentinels
