"""The Django surface on a Redis Cluster: the URL, system checks, ``delayq_status``, the
metrics collector, the event stream, and schedule() while no node answers."""

from __future__ import annotations

import json
import logging
from io import StringIO

import pytest
from django.core.management import call_command
from redis.cluster import RedisCluster

from django_delayq import compat, schedule
from django_delayq.core import events
from django_delayq.core.conf import problems
from django_delayq.core.connection import get_engine, make_client, split_cluster_url
from django_delayq.models import JobStatus
from django_delayq.observe.checks import check_redis
from django_delayq.testing import run_due_jobs
from tests.cluster.conftest import SPREAD
from tests.cluster.server import free_cluster_port

pytestmark = pytest.mark.django_db(transaction=True)


def test_cluster_urls() -> None:
    assert split_cluster_url("rediss+cluster://u:p@h1:7000,h2:7001,[::1]:7002/?ssl_cert_reqs=none"
                             ) == ("rediss://u:p@h1:7000/?ssl_cert_reqs=none",
                                   [("h2", 7001), ("::1", 7002)])
    assert split_cluster_url("redis+cluster://h1/") == ("redis://h1/", [])
    assert problems({"REDIS_URL": "redis+cluster://h1:7000,h2:7000/"}) == []
    [(key, msg)] = problems({"REDIS_URL": "redis+cluster://h1:7000/2"})
    assert key == "REDIS_URL" and "only database 0" in msg


def test_client_is_a_redis_cluster_with_the_usual_timeouts(redis_cluster) -> None:  # type: ignore[no-untyped-def]
    client = make_client(redis_cluster.url)
    try:
        assert isinstance(client, RedisCluster)
        assert len(client.get_primaries()) == 3
        kwargs = client.get_default_node().redis_connection.connection_pool.connection_kwargs
        assert (kwargs["socket_connect_timeout"], kwargs["socket_timeout"],
                kwargs["socket_keepalive"]) == (1.0, 5.0, True)
    finally:
        client.close()


def test_schedule_with_no_node_reachable_keeps_the_row(settings, caplog) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": "redis+cluster://127.0.0.1:1/"}
    with caplog.at_level(logging.WARNING, logger="django_delayq.core.api"):
        h = schedule("tests.jobs.noop")
    assert h.status == JobStatus.SCHEDULED and "stay in the outbox" in caplog.text
    assert [m.id for m in check_redis()] == ["delayq.W011"]


def test_checks_inspect_every_primary(cluster_settings, redis_cluster) -> None:  # type: ignore[no-untyped-def]
    found = check_redis()
    assert [m.id for m in found] == ["delayq.I010"] * 3  # the test nodes keep no data
    assert {m.msg.split()[3] for m in found} == {"127.0.0.1:%d" % n.port
                                                 for n in redis_cluster.nodes}


def test_status_metrics_and_events_read_every_node(cluster_settings) -> None:  # type: ignore[no-untyped-def]
    for i, queue in enumerate(SPREAD):
        for _ in range(i + 1):
            schedule("tests.jobs.noop", delay=3600, queue=queue)
    first = schedule("tests.jobs.add", 1, 2, queue="slow")
    assert run_due_jobs(list(SPREAD)) == 1
    events.flush()
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    doc = {q["queue"]: q["scheduled"] for q in json.loads(out.getvalue())["queues"]}
    assert doc == {"default": 1, "emails": 2, "slow": 3}
    out = StringIO()
    call_command("delayq_status", "--follow", "--json", "--last", "3", "--count", "3",
                 stdout=out)
    seen = [json.loads(line) for line in out.getvalue().splitlines()]
    assert (seen[-1]["event"], seen[-1]["job"]) == ("succeeded", first.id)
    if compat.prometheus_client is not None:
        from django_delayq.observe import prometheus

        gauge = prometheus.REGISTRY.get_sample_value
        assert gauge("delayq_queue_jobs", {"queue": "emails", "state": "scheduled"}) == 2
        assert gauge("delayq_redis_up") == 1
    assert get_engine().client.exists("{%s}:events" % cluster_settings.DELAYQ["PREFIX"])


def test_worker_start_waits_until_a_node_answers(redis_cluster, caplog) -> None:  # type: ignore[no-untyped-def]
    """``delayq_worker`` builds its engine through ``wait_for_redis``: a cluster client
    that cannot be created yet (no node answers) is retried, not fatal."""
    from django_delayq.engine import Engine
    from django_delayq.worker.loop import wait_for_redis

    dead = "redis+cluster://127.0.0.1:%d/" % free_cluster_port()
    urls = [dead, dead, redis_cluster.url]
    with caplog.at_level(logging.WARNING, logger="django_delayq.worker.loop"):
        engine = wait_for_redis(lambda: Engine(make_client(urls.pop(0)), prefix="wait"))
    assert urls == [] and isinstance(engine.client, RedisCluster) and engine.client.ping()
    assert sum("waiting for Redis" in r.getMessage() for r in caplog.records) == 2
