"""A URL whose scheme does not match the server: a Redis Cluster node behind ``redis://``
(its keys answer MOVED), a single server behind ``redis+cluster://``. Both are settings
to fix, reported as such (``delayq.E034``, exit 2), never as an outage to wait out."""

from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from django_delayq.core.conf import problems
from django_delayq.engine.client import make_client
from django_delayq.engine.server_mode import WrongRedisMode
from django_delayq.observe.checks import check_redis
from django_delayq.worker.loop import wait_for_redis
from tests.cluster.conftest import SPREAD, spread_prefix
from tests.worker import conftest as worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def node_url(settings, redis_cluster):  # type: ignore[no-untyped-def]
    """DELAYQ['REDIS_URL'] a plain URL of one cluster node (the ``+cluster`` forgotten)."""
    url = redis_cluster.nodes[0].url
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": url,
                       "PREFIX": spread_prefix(redis_cluster)}
    return url


@pytest.fixture
def cluster_url_of_server(settings, redis_server):  # type: ignore[no-untyped-def]
    """DELAYQ['REDIS_URL'] a cluster URL of a server without cluster mode."""
    url = "redis+cluster://127.0.0.1:%d/" % redis_server.port
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": url}
    return url


def test_check_says_a_plain_url_names_a_cluster_node(node_url) -> None:  # type: ignore[no-untyped-def]
    [found] = check_redis()
    assert (found.id, found.obj) == ("delayq.E034", "DELAYQ['REDIS_URL']")
    assert "is a Redis Cluster node" in found.msg and "redis+cluster://" in found.msg


def test_a_moved_reply_names_the_cause(node_url, redis_cluster) -> None:  # type: ignore[no-untyped-def]
    client = make_client(node_url)
    elsewhere = next(k for k in ("{a}", "{b}", "{c}", "{d}", "{e}")
                     if redis_cluster.node_of(k) != redis_cluster.nodes[0].port)
    try:
        with pytest.raises(WrongRedisMode, match=r"is a Redis Cluster node \(MOVED \d+ "):
            client.get(elsewhere)
        pipe = client.pipeline()  # a transaction: the error names the command
        pipe.delete(elsewhere)
        with pytest.raises(ResponseError, match="DEL .*is a Redis Cluster node .*redis\\+cluster"):
            pipe.execute()
        assert client.ping()  # the connection is still in step
    finally:
        client.close()


def test_check_says_a_cluster_url_names_a_single_server(cluster_url_of_server) -> None:  # type: ignore[no-untyped-def]
    [found] = check_redis()
    assert found.id == "delayq.E034"
    assert "is not a cluster node" in found.msg and "redis://127.0.0.1:" in found.msg


def _attempts(limit: int):  # type: ignore[no-untyped-def]
    """An ``orphaned`` for ``wait_for_redis`` that ends the wait after ``limit`` asks."""
    asked = []

    def orphaned() -> bool:
        asked.append(1)
        return len(asked) > limit
    return orphaned


def test_the_worker_does_not_wait_on_a_server_in_the_wrong_mode(cluster_url_of_server) -> None:  # type: ignore[no-untyped-def]
    from django_delayq.core.connection import get_engine

    with pytest.raises(WrongRedisMode, match="is not a cluster node"):
        wait_for_redis(get_engine, orphaned=_attempts(20))


def test_the_worker_does_not_start_on_a_cluster_node(node_url) -> None:  # type: ignore[no-untyped-def]
    from django_delayq.core.connection import get_engine

    with pytest.raises(WrongRedisMode, match="is a Redis Cluster node"):
        wait_for_redis(get_engine, orphaned=_attempts(20))


@pytest.mark.parametrize("skip_checks", [False, True])
def test_delayq_worker_exits_2(settings, node_url, tmp_path, skip_checks) -> None:  # type: ignore[no-untyped-def]
    starter = worker.worker_starter(settings, tmp_path)
    start = next(starter)
    try:
        proc = start("--queues", ",".join(SPREAD), *(["--skip-checks"] if skip_checks else []))
        assert worker.wait_or_dump(proc, 60) == 2
        log = worker.LOGS[proc.pid].read_text()
        assert "is a Redis Cluster node" in log and "redis+cluster://" in log
    finally:
        next(starter, None)


def test_a_cluster_url_needs_a_host() -> None:
    for url in ("redis+cluster:///", "rediss+cluster://u:p@/", "redis+cluster://,/"):
        [(key, msg)] = problems({"REDIS_URL": url})
        assert key == "REDIS_URL" and "at least one node" in msg
    assert problems({"REDIS_URL": "redis:///0"}) == []  # redis-py connects to localhost: kept


def test_check_warns_of_full_coverage(settings, redis_cluster) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_cluster.url}
    node = redis_cluster.nodes[1]
    node.client().config_set("cluster-require-full-coverage", "yes")
    try:
        [found] = [m for m in check_redis() if m.id == "delayq.W013"]
        assert "127.0.0.1:%d" % node.port in found.msg
    finally:
        node.client().config_set("cluster-require-full-coverage", "no")
    assert not [m for m in check_redis() if m.id == "delayq.W013"]


def test_schedule_logs_the_cause(node_url, redis_cluster, caplog) -> None:  # type: ignore[no-untyped-def]
    import logging

    from django_delayq import schedule
    from django_delayq.core.connection import get_engine

    queue = next(q for q in SPREAD if redis_cluster.node_of(get_engine().keys(q).jobs)
                 != redis_cluster.nodes[0].port)
    with caplog.at_level(logging.WARNING, logger="django_delayq.core.api"):
        schedule("tests.jobs.noop", queue=queue)
    assert "is a Redis Cluster node (MOVED" in caplog.text
    assert "redis+cluster://" in caplog.text
