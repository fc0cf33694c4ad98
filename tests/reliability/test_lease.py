"""Lease correctness: stale settlements, heartbeats, attempt counting, and the tokens a
re-enqueued job gets (never one that was handed out before)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection

from django_delayq import requeue, schedule, signals
from django_delayq.core import payloads
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.core.reconcile_state import SUCCEEDED_IN_REDIS
from django_delayq.engine import ClaimedJob, NackOutcome
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.housekeeping import LeaseRecovery
from django_delayq.worker.loop import Worker, WorkerOptions
from django_delayq.worker.outcome import LOST_LEASE
from django_delayq.worker.runner import Kind, Outcome, run
from django_delayq.worker.settle import Settler, settled_elsewhere
from tests import jobs_chaos
from tests.helpers import point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cfg(settings, redis_server, exec_table):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    return settings


def outcome(job: ClaimedJob, kind: Kind) -> Outcome:
    now = datetime.now(UTC)
    return Outcome(job=job, kind=kind, path="tests.jobs_chaos.record", started_at=now,
                   finished_at=now, retry_delay_ms=0 if kind is Kind.RETRY else None,
                   error="" if kind is Kind.SUCCESS else "failed")


def expire_and_reclaim(queue: str, job_id: str) -> tuple[ClaimedJob, ClaimedJob]:
    engine = get_engine()
    first = engine.claim(queue, 10, 50).jobs[0]
    engine.mark_started([first])  # it ran (a lost lease of a run that started: an attempt)
    time.sleep(0.1)
    assert [r.outcome for r in engine.recover(queue)] == [NackOutcome.RETRYING]
    second = engine.claim(queue, 10, 60_000).jobs[0]
    assert (first.id, second.id, first.token, second.token) == (job_id, job_id, 1, 2)
    return first, second


@pytest.mark.parametrize("kind", [Kind.SUCCESS, Kind.RETRY, Kind.DEAD])
def test_stale_settlement_is_refused_logged_and_leaves_the_copy_alone(cfg, caplog, kind) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs_chaos.record")
    stale, copy = expire_and_reclaim("default", h.id)
    audit = AuditWriter()
    settler = Settler(get_engine(), get_settings(), audit, "old-worker")
    with caplog.at_level(logging.WARNING, logger="django_delayq.worker.settle"):
        settler.settle([outcome(stale, kind)])
    audit.flush()
    assert "lease lost before it was settled" in caplog.text
    loc = get_engine().inspect("default", h.id)
    assert (loc.place, loc.attempts) == ("inflight", 2)  # the copy still holds its lease
    assert h.job.status == JobStatus.SCHEDULED  # the stale outcome wrote nothing
    assert get_engine().extend("default", [(h.id, copy.token)], 60_000) == [True]
    settler.settle([outcome(copy, Kind.SUCCESS)])
    audit.flush()
    assert (h.job.status, h.job.attempts) == (JobStatus.SUCCEEDED, 2)


def stale_after(case: str) -> tuple[Any, ClaimedJob]:
    """A job whose stale copy (its lease passed) is still held after another delivery
    settled it (``case``: its settled record kept, or gone once its row landed) or after
    Redis lost its keys ("redis-lost-it"); the handle and the stale copy."""
    h = schedule("tests.jobs_chaos.record")
    stale, copy = expire_and_reclaim("default", h.id)
    engine = get_engine()
    if case == "redis-lost-it":
        for key in list(engine.client.scan_iter(match="{%s*" % engine.prefix, count=1000)):
            engine.client.delete(key)
    else:
        assert engine.ack("default", [(h.id, copy.token)], holder="new-worker") == [True]
    if case == "record-forgotten":  # its row landed, then the record was dropped
        Job.objects.filter(pk=h.id).update(status=JobStatus.SUCCEEDED, attempts=2)
        assert engine.forget_settled("default", [h.id], keep_ms=3_600_000) == 1
    return h, stale


@pytest.mark.parametrize("case", ["record-kept", "record-forgotten", "redis-lost-it"])
def test_a_refused_success_is_the_jobs_only_when_no_other_delivery_settled_it(  # type: ignore[no-untyped-def]
        cfg, caplog, case) -> None:
    """A stale copy (its lease passed: a worker stopped past it) acks after another
    worker ran the job and acked it: refused, and no second success is recorded (no
    signal, no row change), though Redis holds the job nowhere now, whether that worker's
    settled record is still kept or went once its row landed. "redis-lost-it": the job's
    keys went (a node that came back empty) and its row is not final: nobody else ran it,
    so the refused success is the job's (recorded once)."""
    h, stale = stale_after(case)
    engine = get_engine()
    audit = AuditWriter()
    sent: list[dict] = []
    receiver = lambda **kw: sent.append(kw)  # noqa: E731
    signals.job_succeeded.connect(receiver, weak=False)
    try:
        with caplog.at_level(logging.WARNING, logger="django_delayq.worker.settle"):
            Settler(engine, get_settings(), audit, "old-worker").settle(
                [outcome(stale, Kind.SUCCESS)])
    finally:
        signals.job_succeeded.disconnect(receiver)
    audit.flush()
    row = Job.objects.get(pk=h.id)
    if case == "redis-lost-it":
        assert [kw["attempt"] for kw in sent] == [1]
        assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 1)
        return
    assert "lease lost before it was settled" in caplog.text and sent == []
    assert (row.status, row.attempts) == (
        (JobStatus.SUCCEEDED, 2) if case == "record-forgotten" else (JobStatus.SCHEDULED, 0))


@pytest.mark.parametrize("kind", [Kind.RETRY, Kind.DEAD])
@pytest.mark.parametrize("case", ["record-kept", "record-forgotten", "redis-lost-it"])
def test_a_refused_failure_is_the_jobs_only_when_an_earlier_attempts_settlement_took_it(  # type: ignore[no-untyped-def]
        cfg, caplog, case, kind) -> None:
    """A stale copy's failure (its lease passed) refused after another delivery ran the
    job and acked it (its settled record, of a later attempt, kept or gone once its row
    landed), or after Redis lost the job: a lost lease, logged, changing nothing (no row
    change, attempt row or signal). Only a settled record of an earlier attempt makes a
    refused failure the job's (tests/reliability/test_lagging_failover.py)."""
    h, stale = stale_after(case)
    engine = get_engine()
    audit = AuditWriter()
    sent: list[dict] = []
    receiver = lambda **kw: sent.append(kw)  # noqa: E731
    lifecycle = (signals.job_retrying, signals.job_dead, signals.job_cancelled)
    for signal_ in lifecycle:
        signal_.connect(receiver, weak=False)
    try:
        with caplog.at_level(logging.WARNING, logger="django_delayq.worker.settle"):
            Settler(engine, get_settings(), audit, "old-worker").settle([outcome(stale, kind)])
    finally:
        for signal_ in lifecycle:
            signal_.disconnect(receiver)
    audit.flush()
    row = Job.objects.get(pk=h.id)
    assert "lease lost before it was settled" in caplog.text and sent == []
    assert (row.status, row.attempts) == (
        (JobStatus.SUCCEEDED, 2) if case == "record-forgotten" else (JobStatus.SCHEDULED, 0))
    assert not JobAttempt.objects.filter(job_id=h.id).exists()


def recovered(recovery: LeaseRecovery, job_id: str) -> bool:
    """One recovery round; whether the job's lease was taken back."""
    recovery.recover("default")
    return get_engine().inspect("default", job_id).place != "inflight"


@pytest.mark.parametrize("landed", [False, True], ids=["row-pending", "row-landed"])
@pytest.mark.parametrize("kind", [Kind.SUCCESS, Kind.DEAD], ids=["ack", "nack"])
def test_a_stale_run_of_a_requeued_job_does_not_take_the_next_runs_settlement(  # type: ignore[no-untyped-def]
        cfg, caplog, kind, landed) -> None:
    """Worker A's run of attempt 2 (of 2) stalls past its lease; the lease recovery ends
    the job dead; ``requeue()`` puts it back and B runs it again as attempt 1 (a requeue
    restarts attempt numbers, not tokens), whose success settles it (a settled record of
    attempt 1). A's run then ends: its settlement is refused, and the record of a lower
    attempt is not a stale copy of A's lease (its token is another): a lost lease, logged,
    changing nothing (B's row, its result; no attempt row, no signal of A's)."""
    h = schedule("tests.jobs_chaos.record", max_attempts=2)
    engine, settings = get_engine(), get_settings()
    audit = {name: AuditWriter() for name in ("A", "B", "recovery")}
    settler = {name: Settler(engine, settings, audit[name], name) for name in ("A", "B")}
    for name in ("A", "B"):  # as Settlement wires them
        audit[name].after_write = settler[name].landed
    recovery = LeaseRecovery(engine, settings, audit["recovery"])
    for _ in range(2):  # attempt 1 lost to a stall too, then attempt 2 (A's, stalled)
        [stale] = payloads.read(engine.claim("default", 10, 50).jobs, claimed=True).run
        assert settler["A"].started(stale)
        audit["A"].flush()
        wait_until(lambda: recovered(recovery, h.id))
        audit["recovery"].flush()
        if engine.inspect("default", h.id).place != "dead":
            engine.reschedule("default", h.id, delay_ms=0)
    assert stale.attempt == 2 and Job.objects.get(pk=h.id).status == JobStatus.DEAD
    requeue(h.id)
    [again] = payloads.read(engine.claim("default", 10, 60_000).jobs, claimed=True).run
    assert (again.attempt, again.token > stale.token) == (1, True)
    assert settler["B"].started(again)
    audit["B"].flush()
    done = outcome(again, Kind.SUCCESS)
    done.result = {"answer": 42}
    settler["B"].settle([done])  # accepted: the record "s 1 B <token>"
    if landed:
        audit["B"].flush()  # its record not forgotten yet
    sent: list[dict] = []
    receiver = lambda **kw: sent.append(kw)  # noqa: E731
    lifecycle = (signals.job_succeeded, signals.job_dead, signals.job_retrying)
    for signal_ in lifecycle:
        signal_.connect(receiver, weak=False)
    try:
        with caplog.at_level(logging.WARNING, logger="django_delayq.worker.settle"):
            settler["A"].settle([outcome(stale, kind)])
    finally:
        for signal_ in lifecycle:
            signal_.disconnect(receiver)
    audit["A"].flush()
    audit["B"].flush()
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.attempts, row.worker_id, row.result) == (
        JobStatus.SUCCEEDED, 1, "B", {"answer": 42}), caplog.text
    assert not JobAttempt.objects.filter(job_id=h.id, worker_id="A", number=2,
                                         error="failed").exists()
    assert sent == [] and "lease lost before it was settled" in caplog.text


def test_an_atomic_jobs_only_run_is_recorded_once_after_redis_lost_it(cfg) -> None:  # type: ignore[no-untyped-def]
    """An atomic job commits its row ``succeeded`` itself, before its ack; Redis then loses
    the job (a node back empty) and the worker's lease passes: its refused ack is the only
    run's, so ``job_succeeded`` is sent once (the final row is this worker's attempt's)."""
    h = schedule("tests.jobs_chaos.record", "x", atomic=True)
    engine, settings = get_engine(), get_settings()
    [job] = engine.claim("default", 10, 200).jobs
    engine.mark_started([job])
    [job] = payloads.read([job]).run
    done = run(job, worker_id="w1", default_max_attempts=3,
               default_backoff=settings.default_backoff)
    assert (done.kind, h.job.status) == (Kind.SUCCESS, JobStatus.SUCCEEDED)
    for key in list(engine.client.scan_iter(match="{%s*" % engine.prefix, count=1000)):
        engine.client.delete(key)
    settler = Settler(engine, settings, AuditWriter(), "w1")
    wait_until(lambda: settler.lease_left(job) <= 0)
    sent: list[dict] = []
    receiver = lambda **kw: sent.append(kw)  # noqa: E731
    signals.job_succeeded.connect(receiver, weak=False)
    try:
        settler.settle([done])
    finally:
        signals.job_succeeded.disconnect(receiver)
    assert [kw["attempt"] for kw in sent] == [1]


@pytest.mark.parametrize("ended", [
    (JobStatus.DEAD, LOST_LEASE), (JobStatus.CANCELLED, LOST_LEASE),
    (JobStatus.SUCCEEDED, SUCCEEDED_IN_REDIS)], ids=["recovered-dead", "recovered-cancelled",
                                                      "reconciled-from-its-record"])
def test_a_row_another_ended_in_this_workers_name_is_not_its_own_success(  # type: ignore[no-untyped-def]
        cfg, ended) -> None:
    """A lease recovery ends a row keeping its worker and attempt (dead, or cancelled when
    its cancel was asked), and a reconciler settles a silent worker's row from its settled
    record in its name: the worker, continued, its lease passed and Redis holding the job
    nowhere, finds its refused ack's row final under its own name and attempt. Not an
    atomic job's own commit: no ``job_succeeded``."""
    h = schedule("tests.jobs_chaos.record")
    engine = get_engine()
    [job] = engine.claim("default", 10, 200).jobs
    status, why = ended
    Job.objects.filter(pk=h.id).update(status=status, attempts=job.attempt, worker_id="A",
                                       last_error=why)
    for key in list(engine.client.scan_iter(match="{%s*" % engine.prefix, count=1000)):
        engine.client.delete(key)
    settler = Settler(engine, get_settings(), AuditWriter(), "A")
    wait_until(lambda: settler.lease_left(job) <= 0)
    sent: list[dict] = []
    receiver = lambda **kw: sent.append(kw)  # noqa: E731
    signals.job_succeeded.connect(receiver, weak=False)
    try:
        settler.settle([outcome(job, Kind.SUCCESS)])
    finally:
        signals.job_succeeded.disconnect(receiver)
    assert sent == []
    assert Job.objects.get(pk=h.id).status == status


def test_the_row_check_of_refused_acks_recovers_from_a_dropped_connection(cfg) -> None:  # type: ignore[no-untyped-def]
    """On the ack reader's thread, a connection the database dropped fails at most one
    check (the run taken for the job's, as without it); the next opens another."""
    h = schedule("tests.jobs_chaos.record")
    Job.objects.filter(pk=h.id).update(status=JobStatus.SUCCEEDED, worker_id="w2", attempts=1)
    [job] = get_engine().claim("default", 10, 60_000).jobs
    out: list[set[str]] = []

    def reader() -> None:
        out.append(settled_elsewhere([job], "w1"))
        connection.connection.close()  # the server closed it (a restart, an idle timeout)
        out.append(settled_elsewhere([job], "w1"))
        out.append(settled_elsewhere([job], "w1"))
        connection.close()

    thread = threading.Thread(target=reader)
    thread.start()
    thread.join()
    assert out[0] == out[2] == {h.id} and out[1] in ({h.id}, set())


def test_a_held_job_whose_lease_passed_starts_only_if_redis_still_gives_it(cfg) -> None:  # type: ignore[no-untyped-def]
    """What a worker stopped past its leases finds when continued, before its heartbeat
    has run (none here: nothing extends them): a job it holds whose lease, as it last
    extended it, has passed is extended first. "taken" was taken back (and claimed again)
    meanwhile: refused, it is not started (its copy runs elsewhere). "kept" was not:
    extended, it runs. "fresh" still had its lease: it runs, nothing asked."""
    engine, settings = get_engine(), get_settings()
    worker = Worker(engine, settings, WorkerOptions(queues=("default",), concurrency=1))
    held, sent = [], time.monotonic()
    for tag in ("taken", "kept"):  # leases of 0.3 s, taken's ending first
        schedule("tests.jobs_chaos.record", tag)
        held += engine.claim("default", 10, 300).jobs
    taken, kept = (Job.objects.get(pk=j.id) for j in held)
    wait_until(lambda: any(r.id == taken.id for r in engine.recover("default", limit=1)))
    assert [j.id for j in engine.claim("default", 10, 60_000).jobs] == [taken.id]  # elsewhere
    wait_until(lambda: time.monotonic() > sent + 0.3)  # the stall: both leases went by
    fresh = schedule("tests.jobs_chaos.record", "fresh")
    held += engine.claim("default", 10, 60_000).jobs
    with worker.claiming.handover.lock:
        worker.claiming.handover.take("default", held)
    worker.execution.start()
    try:
        wait_until(lambda: worker.ledger.capacity_used() == 0 and all(
            len(jobs_chaos.executions(job_id)) == 1 for job_id in (kept.pk, fresh.id)))
    finally:
        worker.execution.stop()
    assert jobs_chaos.executions(taken.pk) == []
    [handed] = [o for o in worker.ledger.take_done() if o.job.id == taken.pk]
    assert handed.kind is Kind.DEFER  # back to Redis: refused, the other copy's
    loc = engine.inspect("default", taken.pk)
    assert (loc.place, loc.attempts) == ("inflight", 1)  # the copy claimed elsewhere
    taken.refresh_from_db()
    assert (taken.status, taken.attempts) == (JobStatus.SCHEDULED, 0)  # untouched


def test_a_held_job_handed_back_uses_no_grant_of_its_callable_limit(cfg) -> None:  # type: ignore[no-untyped-def]
    """A held job whose lease passed, taken back and run elsewhere under its callable's
    only concurrency slot, is handed back before its limits are asked: it takes no grant,
    and its settlement frees no slot (the other delivery's stays held)."""
    path = "tests.jobs_chaos.sleep_record"
    cfg.DELAYQ = {**cfg.DELAYQ, "CALLABLE_LIMITS": {path: {"concurrency": 1}}}
    engine, settings = get_engine(), get_settings()
    worker = Worker(engine, settings, WorkerOptions(queues=("default",), concurrency=1))
    h = schedule(path, 5.0, "j")
    stale = engine.claim("default", 10, 300).jobs
    wait_until(lambda: any(r.id == h.id for r in engine.recover("default", limit=1)))
    assert [j.id for j in engine.claim("default", 10, 60_000).jobs] == [h.id]  # elsewhere,
    assert engine.acquire(path, h.id, lease_ms=60_000, rate=None, concurrency=1).granted
    wait_until(lambda: worker.ledger.lease_left(stale[0]) <= 0)  # running with the slot
    with worker.claiming.handover.lock:
        worker.claiming.handover.take("default", stale)
    worker.execution.start()
    done: list[Outcome] = []
    try:
        wait_until(lambda: bool(done.extend(worker.ledger.take_done()) or done))
    finally:
        worker.execution.stop()
    assert [o.kind for o in done] == [Kind.DEFER] and done[0].callable_limit is None
    worker.settlement.settler.settle(done)
    late = schedule(path, 0.1, "k")
    assert not engine.acquire(path, late.id, lease_ms=60_000, rate=None, concurrency=1).granted


def test_long_job_that_heartbeats_is_never_redelivered(cfg) -> None:  # type: ignore[no-untyped-def]
    """Lease 0.5 s, job 2.5 s, and a second worker eager to recover expired leases."""
    cfg.DELAYQ = {**cfg.DELAYQ, "LEASE_SECONDS": 0.5, "RECOVER_INTERVAL_SECONDS": 0.05}
    h = schedule("tests.jobs_chaos.sleep_record", 2.5, "long")
    workers = [Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",),
                                                                  concurrency=2))
               for _ in range(2)]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: h.status == JobStatus.SUCCEEDED, timeout=20)
    finally:
        for w in workers:
            w.request_stop()
        for t in threads:
            t.join(10)
    assert len(jobs_chaos.executions(h.id)) == 1
    assert h.job.attempts == 1
    assert not JobAttempt.objects.filter(job_id=h.id).exists()


@pytest.mark.worker
def test_attempts_count_crash_recoveries_until_dead(cfg, start_worker) -> None:  # type: ignore[no-untyped-def]
    """Two SIGKILLed deliveries of a job with max_attempts=2: dead, both attempts recorded."""
    cfg.DELAYQ = {**cfg.DELAYQ, "LEASE_SECONDS": 1.0}
    h = schedule("tests.jobs_chaos.sleep_record", 60, "crash", max_attempts=2)
    for attempt in (1, 2):
        proc = start_worker("--concurrency", "1")
        # running attempt n, flushed (with the lost attempt n-1 in the same audit write)
        wait_until(lambda a=attempt: len(jobs_chaos.executions(h.id)) == a and
                   (h.job.status, h.job.attempts) == (JobStatus.RUNNING, a), timeout=30)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        loc = get_engine().inspect("default", h.id)
        assert (loc.place, loc.attempts) == ("inflight", attempt)
    survivor = start_worker("--concurrency", "1")  # recovers the expired lease: no attempts left
    try:
        wait_until(lambda: h.status == JobStatus.DEAD, timeout=30)
    finally:
        survivor.send_signal(signal.SIGTERM)
        survivor.wait(30)
    row = h.job
    lost = "django_delayq.exceptions.LeaseLost"
    assert (row.attempts, row.error_type, row.last_error) == (2, lost, LOST_LEASE)
    assert [e[1] for e in jobs_chaos.executions(h.id)] == [1, 2]
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list(
        "number", "outcome", "error_type", "error", "traceback")) == [
        (1, "retrying", lost, LOST_LEASE, ""), (2, "dead", lost, LOST_LEASE, "")]
    assert get_engine().inspect("default", h.id).place == "dead"


def _acked_unrecorded(h_id: str) -> None:
    """A worker ran the job and acked it, then died before its first audit write."""
    engine = get_engine()
    job = engine.claim("default", 10, 60_000).jobs[0]
    assert (job.id, job.token) == (h_id, 1)
    assert engine.ack("default", [(job.id, job.token)]) == [True]


def _beat(worker_id: str, age_ms: float) -> None:
    engine = get_engine()
    engine.client.zadd("{%s}:workers" % get_settings().prefix,
                       {worker_id: engine.time_ms() - age_ms})


def _reenqueued_attempt(h_id: str) -> int:
    """The attempt number of the next delivery of the re-enqueued job; its lease token is
    seeded from the Redis clock, uncounted run or not (above any count of deliveries:
    never a token handed out before, not the acked delivery's 1 either)."""
    job = get_engine().claim("default", 10, 60_000).jobs[0]
    assert job.id == h_id
    assert job.token > 10**12
    return job.attempt


def test_reenqueue_counts_a_run_whose_worker_went_silent_before_recording_it(cfg) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs_chaos.record")
    _acked_unrecorded(h.id)
    _beat("crashed", get_settings().lease_ms)  # silent for a lease: three missed heartbeats
    r = Reconciler(get_engine(), get_settings(), ("default",))
    r.check_epochs()
    assert r.run_all(grace_seconds=0) == 1
    assert _reenqueued_attempt(h.id) == 2  # the unrecorded run counted; never token 1 again


def test_reenqueue_waits_for_a_quiet_worker_to_speak_or_fall_silent(cfg) -> None:  # type: ignore[no-untyped-def]
    """A worker last heard just before the first look may have run the job and died, or
    be alive (then its flush would have changed the row): the seed waits to know."""
    cfg.DELAYQ = {**cfg.DELAYQ, "LEASE_SECONDS": 3.0}  # heartbeats every second
    silent_s = 2 * 3.0 / 3
    for speaks, attempt in ((True, 1), (False, 2)):
        h = schedule("tests.jobs_chaos.record")
        _acked_unrecorded(h.id)
        _beat("quiet", 0)
        if speaks:
            beat = threading.Timer(0.5, _beat, ("quiet", 0))
            beat.start()
        r = Reconciler(get_engine(), get_settings(), ("default",))
        r.check_epochs()
        started = time.monotonic()
        assert r.run_all(grace_seconds=0) == 1
        took = time.monotonic() - started
        assert _reenqueued_attempt(h.id) == attempt
        if not speaks:
            assert took >= silent_s - 0.2  # decided once the worker was silent
        Job.objects.filter(pk=h.id).update(status=JobStatus.SUCCEEDED)  # done with it
        get_engine().client.delete("{%s}:workers" % get_settings().prefix)


def test_reenqueue_of_a_running_row_seeds_its_attempt(cfg) -> None:  # type: ignore[no-untyped-def]
    """attempt 2 was running when its worker died; Redis no longer holds the job."""
    h = schedule("tests.jobs_chaos.record")
    _acked_unrecorded(h.id)
    Job.objects.filter(pk=h.id).update(status=JobStatus.RUNNING, attempts=2, worker_id="gone")
    r = Reconciler(get_engine(), get_settings(), ("default",))
    r.check_epochs()
    assert r.run_all(grace_seconds=0) == 1
    assert _reenqueued_attempt(h.id) == 3
