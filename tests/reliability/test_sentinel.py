"""A failover under Redis Sentinel: a real worker subprocess connected through
``redis+sentinel://`` keeps draining while its master is SIGKILLed and a replica promoted.

What a failover can lose is shown, not assumed: jobs scheduled after the replication stream
is cut are acknowledged by the old master and never reach the replica (asynchronous
replication); jobs scheduled while no master answers stay in the outbox. After the
promotion neither group is on the new master; the reconciler brings both back from their
audit rows and every job ends succeeded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_delayq import schedule
from django_delayq.core.conf import get_settings, problems
from django_delayq.core.connection import get_engine, set_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine import Engine
from django_delayq.engine.client import make_client
from django_delayq.models import Job, JobStatus
from tests import jobs_chaos
from tests.conftest import unique_prefix
from tests.helpers import ALLOWED, wait_until
from tests.reliability.sentinel_servers import SentinelSet
from tests.worker import conftest as worker_conftest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sentinel_set() -> Iterator[SentinelSet]:
    servers = SentinelSet().start()
    yield servers
    servers.cleanup()


def succeeded(ids: list[str]) -> int:
    return Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count()


def not_in_redis(ids: list[str]) -> list[str]:
    engine = get_engine()
    return [i for i in ids if engine.inspect("default", i).place == ""]


def test_worker_follows_a_failover_and_the_outbox_brings_back_what_it_lost(  # type: ignore[no-untyped-def]
        settings, sentinel_set, start_worker, exec_table, caplog) -> None:
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": sentinel_set.url,
                       "PREFIX": unique_prefix(), "ALLOWED_CALLABLES": ALLOWED,
                       "LEASE_SECONDS": 2.0}
    before = [schedule("tests.jobs_chaos.record", "before%d" % i, delay=i * 0.1).id
              for i in range(30)]
    worker = start_worker("--concurrency", "2")
    wait_until(lambda: succeeded(before) >= 5, timeout=60)

    s = get_settings()
    sentinel_set.proxy.cut()  # from here on the replica hears nothing
    lost = [schedule("tests.jobs_chaos.record", "lost%d" % i, delay=3.0).id for i in range(5)]
    assert not_in_redis(lost) == []  # acknowledged by the master ...
    sentinel_set.kill_master()
    # No retries here: each schedule() fails at once, long before a replica can be
    # promoted (the sentinels wait DOWN_AFTER_MS), so none of these reach a master.
    set_engine(Engine(make_client(sentinel_set.url, retry=Retry(NoBackoff(), 0)), s.prefix))
    try:
        with caplog.at_level(logging.WARNING):
            outbox = [schedule("tests.jobs_chaos.record", "down%d" % i).id for i in range(3)]
    finally:
        set_engine(None)
    assert caplog.text.count("stay in the outbox") >= len(outbox)
    assert Job.objects.filter(pk__in=outbox).count() == len(outbox)

    wait_until(sentinel_set.promoted, timeout=120, step=0.1)
    # The wake listener subscribes again, to the new master.
    channel = get_engine().keys("default").channel
    new_master = sentinel_set.replica.client()
    wait_until(lambda: dict(new_master.pubsub_numsub(channel)).get(channel.encode()) == 1,
               timeout=60, step=0.1)
    # ... but not replicated: neither group is on the new master.
    assert sorted(not_in_redis(lost + outbox)) == sorted(lost + outbox)

    reconciler = Reconciler(get_engine(), s, s.queues)

    def reconciled() -> bool:  # each back in Redis, unless the worker ran it already
        reconciler.run_all(grace_seconds=0)
        waiting = set(Job.objects.filter(pk__in=lost + outbox, status=JobStatus.SCHEDULED)
                      .values_list("pk", flat=True))
        return not waiting.intersection(not_in_redis(lost + outbox))

    wait_until(reconciled, timeout=60, step=0.5)
    everything = before + lost + outbox

    def finished() -> bool:
        # Acks the old master took but never replicated put jobs back in flight on the new
        # one; such a job can end set aside with its row live again: the reconciler (here
        # without grace, in a worker after RECONCILE_GRACE_SECONDS) runs it once more.
        reconciler.run_all(grace_seconds=0)
        return succeeded(everything) == len(everything)

    try:
        wait_until(finished, timeout=180, step=0.5)
    except AssertionError as exc:  # it failed once under load: the rows and the log say why
        rows = list(Job.objects.filter(pk__in=everything).values_list(
            "id", "status", "attempts", "worker_id"))
        raise AssertionError("%s; worker %s; rows %s; log:\n%s" % (
            exc, worker.poll(), rows,
            worker_conftest.LOGS[worker.pid].read_text(errors="replace")[-8000:])) from None
    assert worker.poll() is None  # the worker rode it out
    ran = {job_id for job_id, *_ in jobs_chaos.executions()}
    assert ran == set(everything)


@pytest.mark.parametrize(("url", "named"), [
    ("redis+sentinel://h1:26379,h2:26379/", "service name"),
    ("redis+sentinel://h1:26379/mymaster/x", "'x'"),
    ("redis+sentinel://h1:port/mymaster/0", "'h1:port'"),
    ("redis+sentinel:///mymaster/0", "no sentinel"),
    ("redis+sentinel://h1/a/1/2", "service name"),
])
def test_a_bad_sentinel_url_is_a_settings_error_naming_it(url: str, named: str) -> None:
    found = dict(problems({"REDIS_URL": url}))
    assert named in found["REDIS_URL"] and url in found["REDIS_URL"]


def test_a_sentinel_url_gives_the_master_of_its_service_with_its_options() -> None:
    client = make_client("rediss+sentinel://:pw@h1,h2:26380/mymaster/3"
                         "?socket_timeout=0.5&sentinel_password=sp")
    pool = client.connection_pool
    assert pool.service_name == "mymaster"
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["password"]) == (3, "pw")
    assert pool.connection_kwargs["socket_timeout"] == 0.5
    assert "SSL" in pool.connection_class.__name__
    sentinels = [s.connection_pool.connection_kwargs for s in pool.sentinel_manager.sentinels]
    assert [(k["host"], k["port"], k["password"], k["socket_timeout"]) for k in sentinels] == [
        ("h1", 26379, "sp", 0.5), ("h2", 26380, "sp", 0.5)]
    # rediss: TLS to the sentinels too (the sentinel password and the master's address
    # cross the network to them)
    assert all("SSL" in s.connection_pool.connection_class.__name__
               for s in pool.sentinel_manager.sentinels)
    plain = make_client("redis+sentinel://h1/mymaster").connection_pool.sentinel_manager
    assert all("SSL" not in s.connection_pool.connection_class.__name__
               for s in plain.sentinels)
