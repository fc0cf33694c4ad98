"""Atomic jobs (worker/atomic.py): the option at every way of scheduling, and one attempt's
writes committing with its success, once, on a real Redis and database.

The jobs add one to a counter row and insert a row keyed by their id
(``tests/jobs_atomic.py``): what the tables hold is what committed."""

from __future__ import annotations

import dataclasses
import sys
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from django.db import connection
from django.utils import timezone

from django_delayq import (
    DelayQError,
    InvalidJob,
    JobSpec,
    cancel,
    job,
    requeue,
    schedule,
    schedule_many,
)
from django_delayq.core import conf, payloads, periodic
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt, JobStatus, Schedule
from django_delayq.worker import atomic, runner
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.housekeeping import LeaseRecovery
from django_delayq.worker.settle import Settler
from tests import jobs_atomic
from tests.helpers import ALLOWED, burst, point_at, wait_until

if TYPE_CHECKING:
    from django_delayq.engine import ClaimedJob

pytestmark = pytest.mark.django_db(transaction=True)
BUMP = "tests.jobs_atomic.bump"
FAR = 10**14  # a claim "now" after every due time


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, ALLOWED_CALLABLES=[*ALLOWED, "tests.jobs_atomic"])
    jobs_atomic.create_tables(["a", "b"])
    return get_engine()


def flags(*ids: str) -> list[bool]:
    found = dict(Job.objects.filter(pk__in=ids).values_list("id", "atomic"))
    return [found[i] for i in ids]


def claimed(engine: Any, job_id: str) -> ClaimedJob:
    """``job_id`` claimed, with its payload read from its row as a worker reads it."""
    jobs = engine.claim("default", 100, 60_000, now_ms=FAR).jobs
    loaded = payloads.read([j for j in jobs if j.id == job_id])
    assert len(loaded.run) == 1, loaded
    return loaded.run[0]


def attempt(job: ClaimedJob) -> runner.Outcome:
    return runner.run(job, worker_id="w-test", default_max_attempts=3, default_backoff=None)


# -- the option ------------------------------------------------------------------------

def test_every_way_of_scheduling_stores_atomic_on_the_row(dq) -> None:  # type: ignore[no-untyped-def]
    plain = schedule(BUMP, "a").id
    direct = schedule(BUMP, "a", atomic=True).id
    using = job(BUMP).using(atomic=True).schedule("a").id
    many = schedule_many(BUMP, [JobSpec(args=("a",)), JobSpec(args=("b",), atomic=False)],
                         atomic=True)
    specs = schedule_many(BUMP, [JobSpec(args=("a",), atomic=True), JobSpec(args=("b",))])
    call = job(BUMP).using(atomic=True).schedule_many([JobSpec(args=("a",))])
    assert flags(plain, direct, using, *many, *specs, *call) == [
        False, True, True, True, False, True, False, True]
    assert payloads.of(claimed(dq, direct)).atomic is True


def test_a_decorated_function_is_atomic_unless_a_job_says_otherwise(dq) -> None:  # type: ignore[no-untyped-def]
    marked = schedule("tests.jobs_atomic.always_atomic", "a").id
    unmarked = schedule("tests.jobs_atomic.always_atomic", "a", atomic=False).id
    many = schedule_many("tests.jobs_atomic.always_atomic", [JobSpec(args=("a",))])
    assert flags(marked, unmarked, *many) == [True, False, True]


def test_bad_values_and_async_functions_are_refused_at_schedule(dq) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match="atomic must be True, False or None"):
        schedule(BUMP, "a", atomic="yes")
    with pytest.raises(InvalidJob, match="atomic must be"):
        job(BUMP).using(atomic=1)
    with pytest.raises(InvalidJob, match="async def"):
        schedule("tests.jobs_atomic.async_plain", atomic=True)
    with pytest.raises(InvalidJob, match="async def"):
        schedule("tests.jobs_atomic.async_marked")  # marked by the decorator
    assert not Job.objects.exists()


def test_requeue_keeps_atomic(dq) -> None:  # type: ignore[no-untyped-def]
    first = schedule(BUMP, "a", atomic=True)
    assert burst() == 0
    assert flags(requeue(first.id).id) == [True]


def test_a_schedule_s_ticks_are_atomic_when_it_says_so(dq, settings) -> None:  # type: ignore[no-untyped-def]
    start = timezone.now() + timedelta(minutes=1)
    s = Schedule.objects.create(name="atomic", callable_path=BUMP, args=["a"],
                                interval_seconds=60, start_at=start, atomic=True)
    assert flags(periodic.keep(s) or "") == [True]
    settings.DELAYQ = {**settings.DELAYQ, "SCHEDULES": {"nightly": {
        "callable": BUMP, "args": ["b"], "cron": "0 2 * * *", "atomic": True}}}
    periodic.sync_from_settings()
    assert Schedule.objects.get(name="nightly").atomic is True
    problems = conf.settings_problems({"x": {"callable": BUMP, "cron": "0 2 * * *",
                                                  "atomic": "yes"}})
    assert problems == ["DELAYQ['SCHEDULES']['x']: 'atomic' must be True or False, not 'yes'"]


# -- the attempt -------------------------------------------------------------------------

def test_a_success_commits_the_writes_and_the_row_together(dq) -> None:  # type: ignore[no-untyped-def]
    h = schedule(BUMP, "a", atomic=True)
    assert burst() == 0
    row = h.job
    assert (row.status, row.attempts, row.result, row.worker_id != "") == (
        JobStatus.SUCCEEDED, 1, "a", True)
    assert row.started_at is not None and row.finished_at is not None
    assert jobs_atomic.counters()["a"] == 1 and jobs_atomic.effects() == {h.id: 1}
    assert dq.inspect("default", h.id).place == ""  # settled in Redis


def test_a_failure_rolls_the_writes_back_and_retries(dq) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs_atomic.bump_then_fail", "a", atomic=True, backoff=[3600])
    assert burst() == 0
    row = h.job
    assert (row.status, row.attempts, row.error_type) == (
        JobStatus.RETRYING, 1, "builtins.ValueError")
    assert jobs_atomic.counters()["a"] == 0 and jobs_atomic.effects() == {}
    plain = schedule("tests.jobs_atomic.bump_then_fail", "b", backoff=[3600])
    assert burst() == 0
    assert plain.status == JobStatus.RETRYING and jobs_atomic.counters()["b"] == 1


def test_a_result_too_large_rolls_back_and_ends_dead(dq, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "MAX_PAYLOAD_BYTES": 1000}
    h = schedule("tests.jobs_atomic.bump_big", "a", 5000, atomic=True)
    assert burst() == 0
    assert (h.status, h.job.error_type) == (JobStatus.DEAD, runner.RESULT_TOO_LARGE)
    assert jobs_atomic.counters()["a"] == 0


def test_an_attempt_past_its_time_limit_rolls_back(dq) -> None:  # type: ignore[no-untyped-def]
    h = schedule(BUMP, "a", 0.3, atomic=True, timeout=0.1)
    outcome = attempt(claimed(dq, h.id))
    assert (outcome.kind, outcome.error_type) == (runner.Kind.RETRY, runner.JOB_TIMEOUT)
    assert jobs_atomic.counters()["a"] == 0 and h.status == JobStatus.SCHEDULED


def test_a_second_delivery_of_a_committed_job_does_not_call_it(dq) -> None:  # type: ignore[no-untyped-def]
    h = schedule(BUMP, "a", atomic=True)
    job_ = claimed(dq, h.id)
    first = attempt(job_)
    assert first.kind is runner.Kind.SUCCESS and h.status == JobStatus.SUCCEEDED
    again = attempt(job_)  # the same lease delivered again before its ack: not called
    assert (again.kind, again.result) == (runner.Kind.SUCCESS, "a")
    assert jobs_atomic.counters()["a"] == 1 and jobs_atomic.effects() == {h.id: 1}


def test_an_attempt_whose_row_a_later_attempt_holds_rolls_back(dq) -> None:  # type: ignore[no-untyped-def]
    h = schedule(BUMP, "a", atomic=True)
    job_ = claimed(dq, h.id)
    Job.objects.filter(pk=h.id).update(status=JobStatus.RUNNING, attempts=job_.token + 1)
    outcome = attempt(job_)
    assert (outcome.kind, outcome.error_type) == (runner.Kind.RETRY,
                                                  "django_delayq.exceptions.LeaseLost")
    assert jobs_atomic.counters()["a"] == 0 and h.job.attempts == job_.token + 1


def test_the_fence_lets_one_transaction_make_the_row_final(dq) -> None:  # type: ignore[no-untyped-def]
    h = schedule(BUMP, "a", atomic=True)
    now = timezone.now()
    done = {"worker_id": "w", "started_at": now, "finished_at": now}
    with atomic.transaction_of() as using:
        atomic.commit(using, h.id, 1, result="first", **done)
    with pytest.raises(atomic.NotOurs) as refused, atomic.transaction_of() as using:
        jobs_atomic.bump("a")
        atomic.commit(using, h.id, 2, result="second", **done)
    assert refused.value.committed == atomic.Committed(attempt=1, result="first")
    assert jobs_atomic.counters()["a"] == 0  # the refused transaction rolled back
    assert (h.job.result, h.job.attempts) == ("first", 1)


def test_the_commit_releases_the_job_s_waiting_children(dq) -> None:  # type: ignore[no-untyped-def]
    parent = schedule(BUMP, "a", atomic=True)
    child = schedule(BUMP, "b", atomic=True, after=[parent])
    assert child.status == JobStatus.WAITING
    assert attempt(claimed(dq, parent.id)).kind is runner.Kind.SUCCESS
    assert child.status == JobStatus.SCHEDULED  # released by the commit itself
    plain_parent = schedule(BUMP, "a", atomic=True)  # no children: no resolve round
    assert burst() == 0
    assert [h.status for h in (parent, child, plain_parent)] == [JobStatus.SUCCEEDED] * 3
    assert jobs_atomic.counters() == {"a": 2, "b": 1}


def waiting_for_its_turn(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside ``atomic.transaction_of`` (waiting for the lock)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None and frame.f_code is not atomic.transaction_of.__wrapped__.__code__:
        frame = frame.f_back
    return frame is not None


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's single writer")
def test_a_delivery_waiting_for_the_write_lock_sees_the_commit_made_meanwhile(dq) -> None:  # type: ignore[no-untyped-def]
    """Attempt 1 holds SQLite's write lock (stopped, say) while its lease is taken back;
    attempt 2 waits for the lock, and once attempt 1 has committed it settles the job
    without calling the function: it reads the row after it got the lock."""
    jobs_atomic.CALLS.clear()
    jobs_atomic.HELD.clear()
    jobs_atomic.RELEASE.clear()
    h = schedule("tests.jobs_atomic.bump_held", "a", atomic=True)
    first = claimed(dq, h.id)
    second = dataclasses.replace(first, attempt=first.attempt + 1, token=first.token + 1)
    outcomes: dict[int, runner.Outcome] = {}

    def deliver(job_: ClaimedJob) -> None:
        outcomes[job_.attempt] = attempt(job_)

    threads = [threading.Thread(target=deliver, args=(j,)) for j in (first, second)]
    threads[0].start()
    assert jobs_atomic.HELD.wait(30)  # attempt 1 holds the write lock
    threads[1].start()
    wait_until(lambda: waiting_for_its_turn(threads[1]), 30)
    jobs_atomic.RELEASE.set()
    for t in threads:
        t.join(60)
    assert jobs_atomic.CALLS == [1]  # attempt 2 never called the function
    assert [(outcomes[n].kind, outcomes[n].result) for n in (1, 2)] == [
        (runner.Kind.SUCCESS, "a")] * 2
    assert jobs_atomic.counters()["a"] == 1 and jobs_atomic.effects() == {h.id: 1}
    assert (h.job.status, h.job.attempts) == (JobStatus.SUCCEEDED, 1)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's single writer")
def test_a_stopped_attempt_s_commit_is_recorded_as_its_own_success(dq) -> None:  # type: ignore[no-untyped-def]
    """The same through the lease recovery and the settlement: attempt 1 (worker A) holds
    SQLite's write lock past its lease; the recovery takes the lease back, its record of
    the lost attempt waits for the lock; attempt 2 (worker B) waits for it too. Attempt 1
    commits: the row says attempt 1 succeeded, run once, and stays so: no record of
    attempt 1 as lost (written after its commit), and B's settlement, which did not call
    the function, counts no run."""
    for event in (jobs_atomic.HELD, jobs_atomic.RELEASE):
        event.clear()
    jobs_atomic.CALLS.clear()
    h = schedule("tests.jobs_atomic.bump_held", "a", atomic=True)
    settings = get_settings()
    audit = {name: AuditWriter() for name in ("recovery", "B")}
    recovery = LeaseRecovery(dq, settings, audit["recovery"])
    [first] = payloads.read(dq.claim("default", 10, 50).jobs, claimed=True).run
    dq.mark_started([first])
    outcomes: dict[int, runner.Outcome] = {}

    def deliver(job_: ClaimedJob, worker_id: str) -> None:
        outcomes[job_.attempt] = runner.run(job_, worker_id=worker_id, default_max_attempts=3,
                                            default_backoff=None)

    threads = [threading.Thread(target=deliver, args=(first, "A"))]
    threads[0].start()
    assert jobs_atomic.HELD.wait(30)  # attempt 1 holds the write lock
    wait_until(lambda: (recovery.recover("default"),
                        dq.inspect("default", h.id).place != "inflight")[1])
    threads.append(threading.Thread(target=audit["recovery"].flush))  # waits for the lock
    [second] = payloads.read(dq.claim("default", 10, 60_000).jobs, claimed=True).run
    settler = Settler(dq, settings, audit["B"], "B")
    assert second.attempt == 2 and settler.started(second)
    threads.append(threading.Thread(target=deliver, args=(second, "B")))
    for t in threads[1:]:
        t.start()
    wait_until(lambda: waiting_for_its_turn(threads[2]), 30)
    jobs_atomic.RELEASE.set()
    for t in threads:
        t.join(60)
    settler.settle([outcomes[2]])
    audit["B"].flush()
    assert jobs_atomic.CALLS == [1] and jobs_atomic.counters()["a"] == 1
    row = h.job
    assert (row.status, row.attempts, row.worker_id, row.result) == (
        JobStatus.SUCCEEDED, 1, "A", "a")
    assert not JobAttempt.objects.filter(job_id=h.id).exists()


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's single writer")
def test_cancel_of_a_running_atomic_job_on_sqlite_says_why_it_cannot_be_recorded(dq) -> None:  # type: ignore[no-untyped-def]
    """The running atomic job holds SQLite's write lock: ``cancel()`` cannot write the row's
    ``cancel_requested`` and, past the busy timeout, raises a ``DelayQError`` saying so (not
    a bare ``OperationalError``); Redis has the job marked not to be retried."""
    for event in (jobs_atomic.HELD, jobs_atomic.RELEASE):
        event.clear()
    jobs_atomic.CALLS.clear()
    h = schedule("tests.jobs_atomic.bump_held", "a", atomic=True)
    running = threading.Thread(target=attempt, args=(claimed(dq, h.id),))
    running.start()
    try:
        assert jobs_atomic.HELD.wait(30)  # it holds the write lock
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 200")
        with pytest.raises(DelayQError, match="cancel of job %s not recorded: the SQLite" % h.id):
            cancel(h.id)
        assert dq.inspect("default", h.id).cancel_requested
    finally:
        jobs_atomic.RELEASE.set()
        running.join(60)
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 30000")
    assert (h.status, h.job.cancel_requested) == (JobStatus.SUCCEEDED, False)
