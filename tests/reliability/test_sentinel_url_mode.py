"""A plain ``redis://`` URL that reaches a Sentinel, not the master it monitors: the
Sentinel answers PING but no GET, so this is a setting to fix (``delayq.E034``, exit 2),
never an outage to wait out."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from django_delayq.engine.server_mode import WrongRedisMode
from django_delayq.observe.checks import check_redis
from django_delayq.worker.loop import wait_for_redis
from tests.helpers import wait_until
from tests.redis_server import binaries, free_port
from tests.worker import conftest as worker

pytestmark = pytest.mark.django_db(transaction=True)


def _answers(port: int) -> bool:
    try:
        with redis.Redis(port=port, socket_timeout=2) as client:
            return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture
def sentinel_url(settings, tmp_path: Path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """DELAYQ['REDIS_URL'] a plain URL of a Sentinel of the test's own."""
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %d 1\n"
                    % (port, tmp_path, free_port()))
    proc = subprocess.Popen([binaries()[0], str(conf), "--sentinel", "--loglevel", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _answers(port), timeout=30)
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
