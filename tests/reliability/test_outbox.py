"""Issue 3 item 1: the audit row is the outbox; the reconciler puts back what Redis lacks."""

from __future__ import annotations

import logging
import threading
import time
from io import StringIO

import pytest
from django.core.management import call_command

from django_delayq import schedule
from django_delayq.conf import get_settings
from django_delayq.connection import get_engine
from django_delayq.engine import Engine
from django_delayq.models import Job, JobStatus
from django_delayq.reconcile import Reconciler
from django_delayq.testing import run_due_jobs
from django_delayq.worker import Worker, WorkerOptions
from tests import jobs_chaos
from tests.reliability.conftest import point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def reconciler() -> Reconciler:
    s = get_settings()
    return Reconciler(get_engine(), s, s.queues)


def test_schedule_succeeds_with_redis_down_and_job_runs_once_back(
        settings, fault_server, exec_table, caplog) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, fault_server)
    reconciler().check_epochs()  # epoch exists: a restart with AOF is not data loss
    fault_server.stop()
    with caplog.at_level(logging.WARNING, logger="django_delayq.api"):
        h = schedule("tests.jobs_chaos.record", "outbox")
    assert Job.objects.get(pk=h.id).status == JobStatus.SCHEDULED  # the row is saved
    assert "stay in the outbox" in caplog.text
    fault_server.start()
    assert get_engine().inspect("default", h.id).place == ""  # never reached Redis
    r = reconciler()
    assert r.tick() == 0  # within the grace period: its enqueue may still be on its way
    assert r.run_all(grace_seconds=0) == 1
    assert r.run_all(grace_seconds=0) == 0  # idempotent
    assert run_due_jobs() == 1
    assert h.status == JobStatus.SUCCEEDED
    assert len(jobs_chaos.executions(h.id)) == 1


def _start(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def test_restart_without_persistence_reenqueues_live_rows_without_grace(
        settings, volatile_server, exec_table) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, volatile_server, RECONCILE_GRACE_SECONDS=3600)
    jobs_chaos.reset_hung()
    later = schedule("tests.jobs_chaos.record", "later", delay=3600)
    failing = schedule("tests.jobs_chaos.always_raises", backoff=[3600], max_attempts=5)
    run_due_jobs()
    assert failing.status == JobStatus.RETRYING
    engine = get_engine()
    r = reconciler()
    assert r.tick() == 0  # first look: creates the epoch, nothing is missing
    running = schedule("tests.jobs_chaos.hang", 30)
    worker = Worker(engine, get_settings(), WorkerOptions(queues=("default",), concurrency=1))
    thread = _start(worker)
    try:
        wait_until(lambda: running.status == JobStatus.RUNNING)
        volatile_server.restart()  # no AOF, no RDB: every key is gone
        assert engine.inspect("default", running.id).place == ""
        r._last_epoch = -1e18  # look at the epoch now rather than in a second
        assert r.tick() == 3  # no grace: the loss was detected
        places = {h.id: engine.inspect("default", h.id) for h in (later, failing, running)}
        assert {loc.place for loc in places.values()} == {"pending"}
        assert places[later.id].score_ms == int(later.job.run_at.timestamp() * 1000)
        assert places[failing.id].score_ms == int(failing.job.run_at.timestamp() * 1000)
        assert places[running.id].attempts == 1  # seeded: the next delivery is attempt 2
        jobs_chaos.release_hung()  # the first copy returns; its ack is refused (lease lost)
        wait_until(lambda: running.status == JobStatus.SUCCEEDED and
                   len(jobs_chaos.executions(running.id)) == 2)
        assert running.job.attempts == 2
        assert [e[1] for e in jobs_chaos.executions(running.id)] == [1, 2]
    finally:
        worker.request_stop()
        worker.request_stop()
        thread.join(10)
    assert later.status == JobStatus.SCHEDULED and failing.status == JobStatus.RETRYING


def test_acked_row_with_lagging_audit_is_not_rerun_while_its_worker_lives(
        settings, fault_server) -> None:  # type: ignore[no-untyped-def]
    """The trade-off of reconcile.py: running + no envelope + live worker = flush pending."""
    point_at(settings, fault_server)
    h = schedule("tests.jobs_chaos.record")
    engine: Engine = get_engine()
    job = engine.claim("default", 10, 60_000).jobs[0]
    assert engine.ack("default", [(job.id, job.token)]) == [True]
    # The worker's audit flush has not happened yet: the row still says running.
    Job.objects.filter(pk=h.id).update(status=JobStatus.RUNNING, attempts=1, worker_id="w1")
    workers = "{%s}:workers" % get_settings().prefix
    engine.client.zadd(workers, {"w1": engine.time_ms()})  # what Settler.heartbeat writes
    r = reconciler()
    r.check_epochs()
    assert r.run_all(grace_seconds=0) == 0
    assert r.stats.waiting_on_live_worker == 1
    engine.client.zadd(workers, {"w1": engine.time_ms() - 3 * get_settings().lease_ms})
    assert r.run_all(grace_seconds=0) == 1  # its worker died: at-least-once, run again
    assert engine.inspect("default", h.id).attempts == 1  # seeded from the row


def test_data_loss_reenqueues_running_row_even_with_live_worker(settings, fault_server) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, fault_server)
    h = schedule("tests.jobs_chaos.record")
    engine = get_engine()
    r = reconciler()
    r.check_epochs()
    engine.claim("default", 10, 60_000)
    Job.objects.filter(pk=h.id).update(status=JobStatus.RUNNING, attempts=1, worker_id="w1")
    engine.client.zadd("{%s}:workers" % get_settings().prefix, {"w1": engine.time_ms()})
    other = reconciler()
    other.check_epochs()
    engine.client.flushall()
    engine.client.zadd("{%s}:workers" % get_settings().prefix, {"w1": engine.time_ms()})
    assert r.check_epochs() == ["default", "emails", "slow"]  # gone: r makes a new one
    assert r.check_epochs() == []  # the new epoch is remembered
    assert other.check_epochs() == ["default", "emails", "slow"]  # changed: other sees it
    assert r.run_all(assume_lost=True) == 1
    job = engine.claim("default", 10, 60_000).jobs[0]  # a fast worker runs the copy ...
    assert engine.ack("default", [(job.id, job.token)]) == [True]  # ... audit not flushed
    assert other.run_all(assume_lost=True) == 0  # r re-enqueued it moments ago: no double


def test_concurrent_reconcilers_never_double_a_job(settings, fault_server, exec_table) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, fault_server)
    fault_server.stop()
    handles = [schedule("tests.jobs_chaos.record", "n%d" % i) for i in range(60)]
    fault_server.start()
    results: list[int] = []

    def reconcile() -> None:
        results.append(reconciler().run_all(batch=7, grace_seconds=0))

    threads = [threading.Thread(target=reconcile) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(results) == 60  # each job enqueued by exactly one of them
    assert get_engine().stats("default").ready == 60
    assert run_due_jobs() == 60
    assert len(jobs_chaos.executions()) == 60
    assert {h.status for h in handles} == {JobStatus.SUCCEEDED}


def test_tick_is_cheap_when_nothing_is_wrong(settings, fault_server,  # type: ignore[no-untyped-def]
                                             django_assert_num_queries) -> None:
    point_at(settings, fault_server, RECONCILE_INTERVAL_SECONDS=3600)
    for i in range(5):
        schedule("tests.jobs_chaos.record", "c%d" % i)
    r = reconciler()
    r.check_epochs()  # as a worker that has been running for a while
    r._last_epoch = time.monotonic()
    with django_assert_num_queries(3):  # one per live status, nothing re-enqueued
        assert r.tick() == 0
    with django_assert_num_queries(0):  # interval not over, epoch looked at a moment ago
        assert r.tick() == 0


def test_delayq_reconcile_command(settings, volatile_server) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, volatile_server)
    handles = [schedule("tests.jobs_chaos.record", "x%d" % i) for i in range(3)]
    out = StringIO()
    call_command("delayq_reconcile", "--grace", "0", stdout=out)  # creates the epoch
    assert "re-enqueued 0 job(s)" in out.getvalue()
    volatile_server.restart()
    out = StringIO()
    call_command("delayq_reconcile", "--dry-run", "-v", "2", stdout=out)
    assert "would re-enqueue 3 job(s)" in out.getvalue()
    assert {h.id for h in handles} <= set(out.getvalue().split())
    assert get_engine().stats("default").ready == 0
    out = StringIO()
    call_command("delayq_reconcile", "--assume-lost", stdout=out)
    assert "re-enqueued 3 job(s)" in out.getvalue()
    assert get_engine().stats("default").ready == 3
