"""Atomic jobs (worker/atomic.py): the option at every way of scheduling, and one attempt's
writes committing with its success, once, on a real Redis and database.

The jobs add one to a counter row and insert a row keyed by their id
(``tests/jobs_atomic.py``): what the tables hold is what committed."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from django.utils import timezone

from django_delayq import InvalidJob, JobSpec, job, requeue, schedule, schedule_many
from django_delayq.core import conf, payloads, periodic
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus, Schedule
from django_delayq.worker import atomic, runner
from tests import jobs_atomic
from tests.helpers import ALLOWED, burst, point_at

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
