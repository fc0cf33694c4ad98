"""Cancels of held jobs read again before they start (``worker/held_cancels.py``).

A job held for a thread whose row was read more than ``FRESH_S`` ago has its cancel read
again, with every other held job, in one query, before a thread takes it; a job taken
sooner costs no query. The main loop's sweep does the same for jobs held ``SWEEP_S``,
without ever waiting for a thread's read or failing the loop's round."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext

from django_delayq import cancel, schedule
from django_delayq.core import payloads
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine import CancelOutcome
from django_delayq.engine.outcomes import ClaimedJob
from django_delayq.models import Job, JobStatus
from django_delayq.worker import held_cancels
from django_delayq.worker.held_cancels import FRESH_S, HeldCancels
from django_delayq.worker.ledger import Ledger, key_of
from django_delayq.worker.loop import Worker, WorkerOptions
from django_delayq.worker.outcome import Kind
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

UNSTARTED = "cancelled before it started; it did not run"


def _held(ledger: Ledger, n: int, age: float) -> list[ClaimedJob]:
    """``n`` jobs with rows, held unstarted, their rows read ``age`` seconds ago."""
    jobs = [ClaimedJob(queue="default", id=schedule("tests.jobs.noop", delay=3600).id,
                       due_ms=0, token=1, envelope="", attempt=1) for _ in range(n)]
    ledger.claimed(jobs, read_at=time.monotonic() - age)
    return jobs


def _ask(*jobs: ClaimedJob) -> None:
    Job.objects.filter(pk__in=[j.id for j in jobs]).update(cancel_requested=True)


def test_a_job_read_just_now_is_taken_without_a_query(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch) -> None:
    monkeypatch.setattr(held_cancels, "FRESH_S", 60.0)  # "just now", however slow the machine
    ledger = Ledger()
    cancels = HeldCancels(ledger)
    [job] = _held(ledger, 1, 0.0)
    _ask(job)  # within FRESH_S of its read: the window the docs name
    with CaptureQueriesContext(connection) as queries:
        assert cancels.check(job)
    assert (len(queries), cancels.reads) == (0, 0)
    assert ledger.start(job)


def test_an_old_read_is_read_again_for_every_held_job_in_one_query(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch) -> None:
    monkeypatch.setattr(held_cancels, "FRESH_S", 60.0)  # a read just now stays fresh here
    ledger = Ledger()
    cancels = HeldCancels(ledger)
    first, kept, other = _held(ledger, 3, 65.0)
    _ask(first, other)
    with CaptureQueriesContext(connection) as queries:
        assert cancels.check(first)
    assert (len(queries), cancels.reads) == (1, 1)
    assert ledger.start(first) is None  # ended: never started
    assert ledger.unstarted() == [kept]  # ``other`` ended too, by the same read
    done = ledger.take_done()
    assert sorted(o.job.id for o in done) == sorted([first.id, other.id])
    assert {(o.kind, o.error) for o in done} == {(Kind.DEAD, UNSTARTED)}
    with CaptureQueriesContext(connection) as queries:
        assert cancels.check(kept)  # read just now
    assert len(queries) == 0
    assert ledger.start(kept)


def test_cancels_that_cannot_be_read_keep_the_job_from_starting(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch) -> None:
    ledger = Ledger()
    cancels = HeldCancels(ledger)
    [job] = _held(ledger, 1, FRESH_S + 5)

    def down(ids: object) -> set[str]:
        raise DatabaseError("the database is down")

    monkeypatch.setattr(payloads, "cancels_asked", down)
    assert not cancels.check(job)
    assert ledger.unstarted() == [job]  # still held: the worker defers it


class _Down:
    """``payloads.cancels_asked`` while the database is down: each call counted, refused."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, ids: object) -> set[str]:
        self.calls += 1
        raise DatabaseError("the database is down")


def test_after_a_failed_read_the_other_threads_defer_without_a_query(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch) -> None:
    """Several threads coming to held jobs while the database is down: the first one's
    read fails, the others defer theirs without trying again (one connection attempt,
    not one per thread), until ``FAILED_S`` has passed."""
    monkeypatch.setattr(held_cancels, "FAILED_S", 3600.0)
    ledger = Ledger()
    cancels = HeldCancels(ledger)
    first, second = _held(ledger, 2, FRESH_S + 5)
    real, down = payloads.cancels_asked, _Down()
    monkeypatch.setattr(payloads, "cancels_asked", down)
    assert not cancels.check(first)
    assert not cancels.check(second)
    assert not cancels.check(first)
    assert down.calls == 1
    assert ledger.unstarted() == [first, second]  # both still held: deferred by the runner
    monkeypatch.setattr(held_cancels, "FAILED_S", 0.0)  # the pause is over: read again
    assert not cancels.check(second)
    assert down.calls == 2
    monkeypatch.setattr(payloads, "cancels_asked", real)  # the database is back
    assert cancels.check(second) and cancels.reads == 1


def test_a_failing_sweep_is_a_warning_and_does_not_raise(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch, caplog) -> None:
    ledger = Ledger()
    cancels = HeldCancels(ledger)
    _held(ledger, 1, held_cancels.SWEEP_S + 5)
    down = _Down()
    monkeypatch.setattr(payloads, "cancels_asked", down)
    monkeypatch.setattr(held_cancels, "FAILED_S", 0.0)  # each sweep tries
    with caplog.at_level(logging.WARNING, logger=held_cancels.__name__):
        for _ in range(3):
            cancels._next_sweep = 0.0  # looks at most every SWEEP_S
            cancels.sweep()  # raises nothing
    assert down.calls == 3
    logged = [r for r in caplog.records if r.name == held_cancels.__name__]
    assert [r.levelno for r in logged] == [logging.WARNING]  # once: rate-limited
    assert "the database is down" in logged[0].getMessage()


def test_the_sweep_does_not_wait_for_a_threads_read(  # type: ignore[no-untyped-def]
        delayq_settings) -> None:
    """A job thread's read runs (a database that hangs): the main loop's sweep returns at
    once instead of waiting for it (that read reads every held job)."""
    ledger = Ledger()
    cancels = HeldCancels(ledger)
    _held(ledger, 1, held_cancels.SWEEP_S + 5)
    sweep = threading.Thread(target=cancels.sweep)
    with cancels._lock:  # what a thread holds while its query runs
        sweep.start()
        sweep.join(30)
        assert not sweep.is_alive()
    assert cancels.reads == 0


def test_the_main_loop_keeps_its_rounds_when_the_sweep_cannot_read(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch, tmp_path, caplog) -> None:
    """A real worker in this process, one job running, one held behind it, the database
    refusing the sweep's reads: the loop's rounds go on without a failure or a backoff
    (its time limits and a drain are not delayed), and nothing is logged as an error."""
    monkeypatch.setattr(held_cancels, "FAILED_S", 0.0)  # each sweep tries
    gate = tmp_path / "gate"
    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("default",), concurrency=1, prefetch=4))
    rounds: list[float] = []
    expire = worker.execution.expire_overdue

    def counted() -> None:
        rounds.append(time.monotonic())
        expire()

    monkeypatch.setattr(worker.execution, "expire_overdue", counted)
    real, down = payloads.cancels_asked, _Down()
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        slow = schedule("tests.jobs.report_then_wait", "slow", str(gate))
        wait_until(lambda: slow.status == JobStatus.RUNNING, timeout=60)
        held = schedule("tests.jobs.noop")
        wait_until(lambda: any(j.id == held.id for j in worker.ledger.unstarted()),
                   timeout=60)
        monkeypatch.setattr(payloads, "cancels_asked", down)
        wait_until(lambda: down.calls >= 3, timeout=60)  # one a sweep: every SWEEP_S
        seen = len(rounds)
        wait_until(lambda: len(rounds) >= seen + 2, timeout=60)  # the rounds go on
        assert worker._outage.failures == 0  # no round failed: none backed off
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert any(r.name == held_cancels.__name__ and r.levelno == logging.WARNING
                   for r in caplog.records)
    finally:
        monkeypatch.setattr(payloads, "cancels_asked", real)
        gate.touch()
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()


def test_the_sweep_reads_jobs_held_a_while(delayq_settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(held_cancels, "SWEEP_S", 60.0)  # "a while", however slow the machine
    ledger = Ledger()
    cancels = HeldCancels(ledger)
    [fresh] = _held(ledger, 1, 0.0)
    _ask(fresh)
    cancels.sweep()
    assert cancels.reads == 0  # none held SWEEP_S yet
    [old] = _held(ledger, 1, 65.0)
    cancels._next_sweep = 0.0  # looks at most every SWEEP_S
    cancels.sweep()
    assert cancels.reads == 1
    assert ledger.unstarted() == [old]  # read again, not cancelled
    assert ledger.read_at(old) > time.monotonic() - 60.0
    assert [o.job.id for o in ledger.take_done()] == [fresh.id]
    cancels.sweep()  # just looked
    assert cancels.reads == 1


def test_a_thread_reads_the_cancel_of_a_job_held_behind_a_long_one(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch, tmp_path) -> None:
    """A real worker in this process, its main loop's sweep off: the job thread itself
    finds the cancel when it comes to the held job, and never starts it."""
    monkeypatch.setattr(held_cancels, "SWEEP_S", 3600.0)
    marker, gate = tmp_path / "mark.txt", tmp_path / "gate"
    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("default",), concurrency=1, prefetch=4))
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        slow = schedule("tests.jobs.report_then_wait", "slow", str(gate))
        wait_until(lambda: slow.status == JobStatus.RUNNING, timeout=60)
        reads = worker.execution.cancels.reads  # one if the thread took ``slow`` late (a loaded machine)
        mark = schedule("tests.jobs.record", str(marker), "mark")
        key = ("default", mark.id)
        wait_until(lambda: any(key_of(j) == key for j in worker.ledger.unstarted()), timeout=60)
        assert cancel(mark.id) is CancelOutcome.ALREADY_RUNNING
        [held] = [j for j in worker.ledger.unstarted() if key_of(j) == key]
        # its row's read is older than FRESH_S: the thread reads it again before the start
        wait_until(lambda: time.monotonic() - (worker.ledger.read_at(held) or 0) > FRESH_S,
                   timeout=60)
        assert mark.status == JobStatus.SCHEDULED and worker.execution.cancels.reads == reads
        gate.touch()
        wait_until(lambda: mark.status == JobStatus.CANCELLED, timeout=60)
        wait_until(lambda: slow.status == JobStatus.SUCCEEDED, timeout=60)
        assert not marker.exists()
        assert worker.execution.cancels.reads == reads + 1
        assert Job.objects.get(pk=mark.id).last_error == UNSTARTED
    finally:
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()
