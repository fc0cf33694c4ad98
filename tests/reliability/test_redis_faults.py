"""Redis faults at every step (refused, timeout, reset, pause).

A real redis-server of the test's own is stopped, restarted (AOF on: data kept),
paused with CLIENT PAUSE, put to sleep with DEBUG SLEEP and has its connections
killed, while a real worker (in this process, a client with a 0.3-0.5 s socket
timeout) runs. Nothing escapes the worker loop, nothing is lost, the state converges.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis
from redis.exceptions import RedisError

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine import Engine, scripts
from django_delayq.models import Job, JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from tests import jobs_chaos
from tests.helpers import burst, point_at, wait_until
from tests.reliability.conftest import timeout_client
from tests.reliability.proxy import LossyProxy

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {"LEASE_SECONDS": 1.0, "RECOVER_INTERVAL_SECONDS": 0.1, "WAKE_INTERVAL_SECONDS": 0.2,
        "RECONCILE_INTERVAL_SECONDS": 0.2, "RECONCILE_GRACE_SECONDS": 0.5}


class Running:
    """A Worker on a thread; records whatever escapes ``run()``."""

    def __init__(self, server, timeout: float = 0.5) -> None:  # type: ignore[no-untyped-def]
        s = get_settings()
        self.worker = Worker(Engine(timeout_client(server, timeout), s.prefix), s,
                             WorkerOptions(queues=("default",), concurrency=2))
        self.escaped: list[BaseException] = []
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.code = self.worker.run()
        except BaseException as exc:  # noqa: BLE001 - what the test is about
            self.escaped.append(exc)

    def stop(self) -> None:
        self.worker.request_stop()
        self.thread.join(15)
        assert self.escaped == [] and self.code == 0


def all_succeeded(handles) -> bool:  # type: ignore[no-untyped-def]
    ids = [h.id for h in handles]
    return Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == len(ids)


def runs_per_job() -> dict[str, int]:
    counts: dict[str, int] = {}
    for job_id, *_ in jobs_chaos.executions():
        counts[job_id] = counts.get(job_id, 0) + 1
    return counts


def test_worker_rides_out_stop_restart_and_killed_connections(settings, fault_server,  # type: ignore[no-untyped-def]
                                                                exec_table) -> None:
    point_at(settings, fault_server, **FAST)
    handles = [schedule("tests.jobs_chaos.record", "a%d" % i, delay=i * 0.05) for i in range(40)]
    w = Running(fault_server)
    try:
        time.sleep(0.5)
        fault_server.stop()  # connection refused for a while ...
        down = [schedule("tests.jobs_chaos.record", "down%d" % i) for i in range(10)]  # outbox
        time.sleep(1.0)
        fault_server.start()  # ... then back, data intact (AOF)
        handles += [schedule("tests.jobs_chaos.record", "b%d" % i, delay=0.5 + i * 0.05)
                    for i in range(20)]
        time.sleep(0.6)
        fault_server.client().client_kill_filter(_type="normal")  # reset every connection
        wait_until(lambda: all_succeeded(handles + down), timeout=30)
        assert w.thread.is_alive()
    finally:
        w.stop()
    counts = runs_per_job()
    assert set(counts) == {h.id for h in handles + down}
    dups = {k: (v, jobs_chaos.executions(k), Job.objects.get(pk=k).describe())
            for k, v in counts.items() if v > 1}
    assert dups == {}  # no lost reply here: exactly once


def test_claim_whose_reply_is_lost_in_a_pause_is_recovered(settings, fault_server,  # type: ignore[no-untyped-def]
                                                            exec_table) -> None:
    """CLIENT PAUSE: the worker's claim times out on the client but runs after the pause;
    the worker's next claim asks again under the same nonce and gets those jobs (a lease
    that ended meanwhile is taken back, uncharged). Nothing lost, each job runs once."""
    point_at(settings, fault_server, **FAST)
    w = Running(fault_server, timeout=0.3)
    try:
        time.sleep(0.3)
        handles = [schedule("tests.jobs_chaos.record", "p%d" % i, delay=0.4) for i in range(10)]
        fault_server.client().execute_command("CLIENT", "PAUSE", 1500, "ALL")
        wait_until(lambda: all_succeeded(handles), timeout=30)
    finally:
        w.stop()
    counts = runs_per_job()
    assert counts == {h.id: 1 for h in handles}
    assert {Job.objects.get(pk=h.id).attempts for h in handles} <= {1, 2}


def test_schedule_during_timeout_and_reset_keeps_the_row_and_runs_once(  # type: ignore[no-untyped-def]
        settings, fault_server, exec_table, caplog) -> None:
    point_at(settings, fault_server)
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": fault_server.url + "?socket_timeout=0.3"}
    get_engine().client.ping()  # a pooled connection, about to be reset
    fault_server.client().client_kill_filter(_type="normal", skipme=True)
    reset = schedule("tests.jobs_chaos.record", "reset")
    sleeper = threading.Thread(target=fault_server.client().execute_command,
                               args=("DEBUG", "SLEEP", 1.5))
    sleeper.start()
    time.sleep(0.1)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        slow = schedule("tests.jobs_chaos.record", "timeout")
    assert time.monotonic() - started < 1.4  # gave up waiting on the sleeping server
    assert "stay in the outbox" in caplog.text
    sleeper.join()
    assert Job.objects.filter(pk__in=[reset.id, slow.id]).count() == 2
    s = get_settings()
    Reconciler(get_engine(), s, s.queues).run_all(grace_seconds=0)
    assert burst() == 0
    assert runs_per_job() == {reset.id: 1, slow.id: 1}


def test_reconciler_raises_only_redis_errors_and_converges_after(settings, fault_server) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, fault_server)
    s = get_settings()
    r = Reconciler(Engine(timeout_client(fault_server), s.prefix), s, s.queues)
    r.check_epochs()
    fault_server.stop()
    h = schedule("tests.jobs_chaos.record")
    with pytest.raises(RedisError):
        r.run_all(grace_seconds=0)
    fault_server.start()
    assert r.run_all(grace_seconds=0) == 1
    assert get_engine().inspect("default", h.id).place == "pending"


def test_ack_whose_reply_is_lost_still_ends_succeeded(settings, fault_server, exec_table) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, fault_server, **FAST)
    proxy = LossyProxy(fault_server.port)
    ack = scripts.load("ack")
    fault_server.client().script_load(ack.source)
    proxy.drop_reply_to(ack.sha.encode())
    s = get_settings()
    worker = Worker(Engine(redis.Redis.from_url(proxy.url), s.prefix), s,
                    WorkerOptions(queues=("default",), concurrency=1))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        h = schedule("tests.jobs_chaos.record", "lost-reply")
        wait_until(lambda: proxy.dropped == 1, timeout=10)
        assert get_engine().inspect("default", h.id).place == ""  # Redis did ack it
        wait_until(lambda: h.status == JobStatus.SUCCEEDED, timeout=5)
    finally:
        worker.request_stop()
        thread.join(10)
        proxy.close()
    assert len(jobs_chaos.executions(h.id)) == 1
