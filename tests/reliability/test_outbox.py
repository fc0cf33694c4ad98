"""The audit row is the outbox: the reconciler puts back what Redis lacks."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_delayq import JobSpec, cancel, schedule, schedule_many
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.epochs import epoch_kind
from django_delayq.core.reconcile import MULTI_ROWS, Reconciler
from django_delayq.core.reconcile_state import CANCELLED_IN_REDIS, DEAD_IN_REDIS
from django_delayq.engine import CancelOutcome, Engine, NackOutcome
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.testing import run_due_jobs
from django_delayq.worker.loop import Worker, WorkerOptions
from tests import jobs_chaos
from tests.helpers import point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def reconciler() -> Reconciler:
    s = get_settings()
    return Reconciler(get_engine(), s, s.queues)


def test_schedule_succeeds_with_redis_down_and_job_runs_once_back(
        settings, fault_server, exec_table, caplog) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, fault_server)
    reconciler().check_epochs()  # epoch exists: a restart with AOF is not data loss
    fault_server.stop()
    with caplog.at_level(logging.WARNING, logger="django_delayq.core.api"):
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
    assert h.job.attempts == 1  # never delivered before: no run presumed, attempt 1


def _start(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def _backdate(*handles, seconds: float = 3600) -> None:
    """As if the rows had been written ``seconds`` ago."""
    for h in handles:
        Job.objects.filter(pk=h.id).update(updated_at=h.job.updated_at - timedelta(seconds=seconds))


def test_restart_without_persistence_reenqueues_live_rows_without_grace(
        settings, volatile_server, exec_table) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, volatile_server, RECONCILE_GRACE_SECONDS=3600)
    jobs_chaos.reset_hung()
    later = schedule("tests.jobs_chaos.record", "later", delay=3600)
    failing = schedule("tests.jobs_chaos.always_raises", backoff=[3600], max_attempts=5)
    run_due_jobs()
    assert failing.status == JobStatus.RETRYING
    _backdate(later, failing)  # written well before the loss
    engine = get_engine()
    r = reconciler()
    assert r.tick() == 0  # first look: the epoch exists (schedule created it), no pass
    running = schedule("tests.jobs_chaos.hang", 30)
    worker = Worker(engine, get_settings(), WorkerOptions(queues=("default",), concurrency=1))
    # the test's reconciler is the one that sees the loss (the worker's could see it first)
    worker.housekeeping.reconciler = Reconciler(engine, get_settings(), ())
    thread = _start(worker)
    try:
        wait_until(lambda: running.status == JobStatus.RUNNING)
        volatile_server.restart()  # no AOF, no RDB: every key is gone
        assert engine.inspect("default", running.id).place == ""
        # The running row changed moments before the loss (a restart may take seconds on
        # a busy machine: its own start time could fall outside the margin).
        Job.objects.filter(pk=running.id).update(updated_at=timezone.now())
        r._last_epoch = -1e18  # look at the epoch now rather than in a second
        assert r.tick() == 2  # no grace, no second look: rows older than the loss
        # The running row changed moments before the loss: it could describe a job put
        # into the new data; a second look (after confirm_seconds) re-enqueues it, its
        # live worker notwithstanding (that worker's ack will be refused).
        added = [0]
        wait_until(lambda: bool(added.__setitem__(0, added[0] + r.tick()) or added[0] == 1),
                   timeout=10)
        places = {h.id: engine.inspect("default", h.id) for h in (later, failing, running)}
        assert places[later.id].place == places[failing.id].place == "pending"
        # The live worker may already have claimed the re-enqueued copy of the running
        # job into its prefetch (its thread is busy with the first copy).
        assert places[running.id].place in ("pending", "inflight")
        assert places[later.id].score_ms == int(later.job.run_at.timestamp() * 1000)
        assert places[failing.id].score_ms == int(failing.job.run_at.timestamp() * 1000)
        # Seeded with 1: the next delivery is attempt 2 (2 already if it was claimed).
        assert places[running.id].attempts == (1 if places[running.id].place == "pending"
                                               else 2)
        assert places[later.id].attempts == places[failing.id].attempts - 1 == 0
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


def test_enqueue_creates_the_epoch_so_the_first_worker_of_a_deploy_sees_no_loss(
        settings, fault_server) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, fault_server)
    engine = get_engine()
    key = get_engine().keys("default").epoch
    assert not engine.client.exists(key)  # a Redis no worker has looked at
    h = schedule("tests.jobs_chaos.record")  # a web process, before any worker starts
    assert epoch_kind(engine.client.get(key).decode()) == "e"
    _backdate(h)
    job = engine.claim("default", 10, 60_000).jobs[0]  # the first worker runs it ...
    assert engine.ack("default", [(job.id, job.token)]) == [True]  # ... audit not flushed
    r = reconciler()
    assert "default" not in r.check_epochs()  # first look at an existing epoch: no loss
    assert r.tick() == 0
    assert engine.inspect("default", h.id).place == ""  # not re-enqueued


def test_first_look_without_epoch_at_a_queue_holding_jobs_is_not_a_loss(
        settings, fault_server) -> None:  # type: ignore[no-untyped-def]
    """No epoch, but the queue holds jobs (the epoch key was evicted or deleted, or an
    older enqueue wrote them): a job acked there may still await its audit flush."""
    point_at(settings, fault_server)
    engine = get_engine()
    handles = [schedule("tests.jobs_chaos.record", i) for i in range(3)]
    _backdate(*handles)
    engine.client.delete(get_engine().keys("default").epoch)
    job = engine.claim("default", 1, 60_000).jobs[0]
    assert engine.ack("default", [(job.id, job.token)]) == [True]  # audit flush pending
    r = reconciler()
    assert r.tick() == 0
    assert "default" not in r._urgent  # no pass without grace
    assert engine.inspect("default", job.id).place == ""  # not re-enqueued
    assert epoch_kind(engine.client.get(get_engine().keys("default").epoch).decode()) == "K"
    engine.purge("default")  # now the data is gone too: that is a loss
    r._last_epoch = -1e18
    assert r.tick() == 3


def test_live_row_of_a_job_dead_in_redis_is_settled_dead(settings, fault_server) -> None:  # type: ignore[no-untyped-def]
    """The final nack reached Redis; the worker died before its audit flush."""
    point_at(settings, fault_server)
    engine = get_engine()
    h = schedule("tests.jobs_chaos.always_raises", max_attempts=1)
    job = engine.claim("default", 10, 60_000).jobs[0]
    assert engine.nack("default", [(job.id, job.token, None)]) == [NackOutcome.DEAD]
    Job.objects.filter(pk=h.id).update(status=JobStatus.RUNNING, attempts=1, worker_id="w1")
    workers = "{%s}:workers" % get_settings().prefix
    engine.client.zadd(workers, {"w1": engine.time_ms()})
    r = reconciler()
    r.check_epochs()
    assert r.run_all(grace_seconds=0) == 0
    assert r.stats.waiting_on_live_worker == 1 and h.status == JobStatus.RUNNING
    engine.client.zadd(workers, {"w1": engine.time_ms() - 3 * get_settings().lease_ms})
    assert r.run_all(grace_seconds=0) == 0  # settled, not re-enqueued
    row = h.job
    assert (row.status, row.attempts, row.last_error) == (JobStatus.DEAD, 1, DEAD_IN_REDIS)
    lost = "django_delayq.exceptions.WorkerLost"
    assert row.error_type == lost
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list(
        "number", "outcome", "error_type")) == [(1, "dead", lost)]
    assert engine.inspect("default", h.id).place == "dead"
    assert r.run_all(grace_seconds=0) == 0 and r.stats.settled == 1  # final now


def test_running_row_whose_cancel_was_asked_and_whose_job_is_gone_ends_cancelled(
        settings, fault_server) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, fault_server)
    engine = get_engine()
    h = schedule("tests.jobs_chaos.record")
    job = engine.claim("default", 10, 60_000).jobs[0]
    assert cancel(h.id) is CancelOutcome.ALREADY_RUNNING
    assert engine.ack("default", [(job.id, job.token)]) == [True]
    # the start was flushed, the end never was (the worker died)
    Job.objects.filter(pk=h.id).update(status=JobStatus.RUNNING, attempts=1, worker_id="gone")
    r = reconciler()
    r.check_epochs()
    assert r.run_all(grace_seconds=0) == 0  # the cancel forbids another run
    assert (h.status, h.job.last_error) == (JobStatus.CANCELLED, CANCELLED_IN_REDIS)
    assert engine.inspect("default", h.id).place == ""


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
    engine.client.zadd(workers, {"w1": engine.time_ms()})  # what Housekeeping.heartbeat writes
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


def test_a_pass_over_more_rows_than_one_multi_holds(settings, fault_server) -> None:  # type: ignore[no-untyped-def]
    """Rows are looked up and re-enqueued MULTI_ROWS at a time (a MULTI blocks Redis)."""
    point_at(settings, fault_server)
    reconciler().check_epochs()
    fault_server.stop()
    count = 2 * MULTI_ROWS + 7
    ids = schedule_many("tests.jobs_chaos.record", [JobSpec(args=(i,)) for i in range(count)])
    fault_server.start()
    r = reconciler()
    assert r.run_all(grace_seconds=0) == count
    assert get_engine().stats("default").ready == count
    assert {get_engine().inspect("default", i).attempts for i in ids[::50]} == {0}
    assert r.run_all(grace_seconds=0) == 0


def test_tick_is_cheap_when_nothing_is_wrong(settings, fault_server,  # type: ignore[no-untyped-def]
                                             django_assert_num_queries) -> None:
    point_at(settings, fault_server, RECONCILE_INTERVAL_SECONDS=3600)
    for i in range(5):
        schedule("tests.jobs_chaos.record", "c%d" % i)
    r = reconciler()
    r.check_epochs()  # as a worker that has been running for a while
    r._last_epoch = time.monotonic()
    # one per live status, nothing re-enqueued; one of the group limits' rows (every queue);
    # one of the pauses' rows (every queue: written back where Redis lost one); one of the
    # running rows whose worker may have gone silent
    with django_assert_num_queries(6):
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
