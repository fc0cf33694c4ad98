"""django_delayq.testing and its pytest plugin, used the way a project's tests would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from freezegun import freeze_time

from django_delayq import (
    JobHandle,
    JobSpec,
    MoveOutcome,
    cancel,
    current_job,
    reschedule,
    run_now,
    schedule,
    schedule_many,
    signals,
    testing,
)
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt
from django_delayq.pytest_plugin import delayq, delayq_eager  # noqa: F401
from django_delayq.testing import run_due_jobs
from tests.helpers import connected


@pytest.fixture
def project(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "ALLOWED_CALLABLES": [
        "tests.jobs", "tests.jobs_more", "tests.jobs_tasks"]}
    delayq_settings.TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQBackend"}}
    return delayq_settings


@pytest.mark.django_db  # a TestCase-like test: the on-commit enqueue never fires
def test_run_due_jobs_inside_the_test_transaction(project, delayq):  # noqa: F811
    handle = schedule("tests.jobs.add", 2, 3)
    assert get_engine().inspect("default", handle.id).place == ""  # still in the outbox
    assert delayq.run_due_jobs() == 1
    job = Job.objects.get(pk=handle.id)
    assert (job.status, job.result, job.worker_id) == ("succeeded", 5, "testing")
    assert delayq.run_due_jobs() == 0


@pytest.mark.django_db
def test_freezegun_and_advance(project, delayq):  # noqa: F811
    with freeze_time("2030-01-01 12:00:00") as frozen:
        handle = schedule("tests.jobs_tasks.now_iso", delay=timedelta(minutes=30))
        assert delayq.run_due_jobs() == 0
        frozen.tick(timedelta(minutes=29))
        assert delayq.run_due_jobs() == 0
        assert delayq.advance(timedelta(minutes=2)) == 1  # ticks the frozen clock too
        job = Job.objects.get(pk=handle.id)
        assert job.status == "succeeded"
        assert job.result == "2030-01-01T12:31:00+00:00"
        assert job.run_at == datetime(2030, 1, 1, 12, 30, tzinfo=UTC)


@pytest.mark.django_db
def test_run_due_jobs_at_a_given_time_runs_retries_on_their_backoff(project, delayq):  # noqa: F811
    handle = schedule("tests.jobs.boom", max_attempts=2, backoff=[600])
    assert delayq.run_due_jobs() == 1
    assert Job.objects.get(pk=handle.id).status == "retrying"
    later = datetime.now(UTC) + timedelta(minutes=5)
    assert delayq.run_due_jobs(now=later) == 0
    assert delayq.run_due_jobs(now=later + timedelta(minutes=6)) == 1
    assert Job.objects.get(pk=handle.id).status == "dead"


@pytest.mark.django_db
def test_a_retry_row_is_due_on_the_clock_it_ran_on(project, delayq):  # noqa: F811
    """A retry's row is due ``now + backoff`` on the clock the job ran on (``now=``), as
    Redis holds it: not wall-clock + backoff."""
    now = datetime(2031, 1, 1, tzinfo=UTC)
    handle = schedule("tests.jobs.boom", max_attempts=2, backoff=[60], at=now)
    assert delayq.run_due_jobs(now=now) == 1
    job = Job.objects.get(pk=handle.id)
    assert (job.status, job.run_at) == ("retrying", now + timedelta(seconds=60))
    assert get_engine().inspect("default", handle.id).score_ms == int(job.run_at.timestamp() * 1000)
    assert delayq.run_due_jobs(now=now + timedelta(seconds=59)) == 0
    assert delayq.run_due_jobs(now=now + timedelta(seconds=60)) == 1
    assert Job.objects.get(pk=handle.id).status == "dead"


@pytest.mark.django_db
def test_a_retry_row_is_due_on_the_test_clock(project, delayq):  # noqa: F811
    """After ``advance`` without freezegun, the row is due on the moved test clock."""
    later = schedule("tests.jobs.boom", max_attempts=2, backoff=[3600])
    assert delayq.advance(timedelta(days=2)) == 1  # the test clock, without freezegun
    run_at = Job.objects.get(pk=later.id).run_at
    expected = datetime.now(UTC) + timedelta(days=2, hours=1)
    assert abs((run_at - expected).total_seconds()) < 60


def _attempts(job_id: str) -> list[tuple[int, str]]:
    return list(JobAttempt.objects.filter(job_id=job_id).order_by("number")
                .values_list("number", "outcome"))


@pytest.mark.django_db
def test_a_job_is_charged_no_attempt_after_a_run_at_a_later_now(project, delayq):  # noqa: F811
    """After ``run_due_jobs(now=...)`` years ahead, a later call (on the test clock,
    behind it) charges the jobs it takes from the outbox no lost attempt: a new job with
    ``max_attempts=2`` fails once and retries after its backoff, as with a worker."""
    now = datetime(2031, 1, 1, tzinfo=UTC)
    first = schedule("tests.jobs.boom", max_attempts=2, backoff=[60], at=now)
    assert delayq.run_due_jobs(now=now) == 1
    assert delayq.run_due_jobs(now=now + timedelta(seconds=60)) == 1
    assert Job.objects.get(pk=first.id).status == "dead"
    later = schedule("tests.jobs.boom", max_attempts=2, backoff=[3600])
    assert delayq.advance(timedelta(days=2)) == 1
    job = Job.objects.get(pk=later.id)
    assert (job.status, job.attempts) == ("retrying", 1)
    assert _attempts(later.id) == [(1, "retrying")]
    assert delayq.advance(timedelta(minutes=59)) == 0
    assert delayq.advance(timedelta(minutes=2)) == 1
    assert (Job.objects.get(pk=later.id).status, _attempts(later.id)) == (
        "dead", [(1, "retrying"), (2, "dead")])


@pytest.mark.django_db
def test_a_job_is_charged_no_attempt_after_a_frozen_time_ahead(project, delayq):  # noqa: F811
    """The same once a ``freeze_time`` ahead of the wall clock ended: the test clock is
    back behind what it stamped in Redis under it."""
    with freeze_time("2031-01-01 12:00:00"):
        schedule("tests.jobs.add", 1, 1)
        assert delayq.run_due_jobs() == 1
    failing = schedule("tests.jobs.boom", max_attempts=2, backoff=[600])
    assert delayq.run_due_jobs() == 1
    assert _attempts(failing.id) == [(1, "retrying")]
    later = schedule("tests.jobs.boom", max_attempts=2, backoff=[600])
    assert delayq.run_due_jobs() == 1
    job = Job.objects.get(pk=later.id)
    assert (job.status, job.attempts, _attempts(later.id)) == ("retrying", 1, [(1, "retrying")])


@pytest.mark.django_db
def test_a_retry_row_is_due_when_redis_holds_it_on_a_moving_clock(project, delayq):  # noqa: F811
    """The test clock moves while the job is settled (here a second per read): the row
    is due on the same instant of it as Redis's due time."""
    handle = schedule("tests.jobs.boom", max_attempts=2, backoff=[3600])
    with freeze_time(datetime.now(UTC), auto_tick_seconds=1):
        assert delayq.run_due_jobs() == 1
    job = Job.objects.get(pk=handle.id)
    assert job.status == "retrying"
    assert get_engine().inspect("default", handle.id).score_ms == int(job.run_at.timestamp() * 1000)


@pytest.mark.django_db
def test_advance_without_freezegun_moves_the_test_clock(project, delayq):  # noqa: F811
    handle = schedule("tests.jobs.add", 1, 1, delay=3600)
    assert delayq.advance(3590) == 0
    assert delayq.advance(timedelta(seconds=20)) == 1
    assert Job.objects.get(pk=handle.id).status == "succeeded"


@pytest.mark.django_db
def test_max_jobs_bounds_a_run(project, delayq):  # noqa: F811
    for i in range(5):
        schedule("tests.jobs.add", i, i)
    assert delayq.run_due_jobs(max_jobs=2) == 2
    assert delayq.run_due_jobs() == 3


@pytest.mark.django_db
def test_delayq_fixture_uses_its_own_prefix_and_cleans_up(project):
    base = settings.DELAYQ["PREFIX"]
    with testing.isolated() as helper:
        prefix = settings.DELAYQ["PREFIX"]
        assert prefix.startswith(base + "-test-")
        schedule("tests.jobs.add", 1, 1, delay=60)
        run_due_jobs()  # enqueues from the outbox
        assert helper.engine.stats("default").scheduled == 1
        client = helper.engine.client
    assert settings.DELAYQ["PREFIX"] == base
    assert client.keys("{%s:*" % prefix) == []


@pytest.mark.django_db
def test_delayq_fixture_leaves_no_key_of_its_prefix(project):
    """Not even the event stream, which a background thread writes: the prefix's keys
    are deleted once it wrote the test's events."""
    with testing.isolated() as helper:
        prefix = settings.DELAYQ["PREFIX"]
        schedule("tests.jobs.add", 1, 1)
        assert helper.run_due_jobs() == 1  # a `succeeded` event, buffered
        client = helper.engine.client
    assert sorted(client.scan_iter(match="*%s*" % prefix)) == []


@pytest.mark.parametrize("transactional", [
    pytest.param(False, marks=pytest.mark.django_db, id="testcase"),
    pytest.param(True, marks=pytest.mark.django_db(transaction=True), id="transactional")])
def test_isolated_runs_only_the_jobs_scheduled_in_it(project, transactional):
    """docs/testing.md: a test's prefix never sees other jobs; live rows scheduled outside
    the block (the real queues' jobs) are not taken from the outbox and run there."""
    outside = [schedule("tests.jobs.add", n, n).id for n in range(3)]
    with testing.isolated() as helper:
        inside = schedule("tests.jobs.add", 5, 5).id
        assert helper.run_due_jobs() == 1
        assert Job.objects.get(pk=inside).result == 10
        assert set(Job.objects.filter(pk__in=outside).values_list("status", flat=True)) \
            == {"scheduled"}
        with testing.isolated() as nested:  # the outer block's jobs are outside it
            assert nested.run_due_jobs() == 0
    assert run_due_jobs() == 3  # the real prefix's own, after the block
    assert sorted(Job.objects.filter(pk__in=outside).values_list("result", flat=True)) \
        == [0, 2, 4]


@pytest.mark.parametrize("transactional", [
    pytest.param(False, marks=pytest.mark.django_db, id="testcase"),
    pytest.param(True, marks=pytest.mark.django_db(transaction=True), id="transactional")])
def test_purge_cancels_the_test_s_jobs_so_none_runs_after_it(project, transactional):
    """purge(): the test's waiting jobs (in Redis, in the outbox, retrying, waiting for a
    parent) end ``cancelled``; the next run_due_jobs() or advance() runs none of them. The
    rows live when the block began are not the test's: left as they are."""
    outside = schedule("tests.jobs.add", 1, 1).id
    with testing.isolated() as helper:
        sent = schedule("tests.jobs.add", 2, 2, delay=60).id
        helper.run_due_jobs()  # from the outbox into Redis
        retrying = schedule("tests.jobs.boom", backoff=[30]).id
        assert helper.run_due_jobs() == 1
        unsent = schedule("tests.jobs.add", 3, 3, delay=60).id  # in the outbox
        child = schedule("tests.jobs.add", 4, 4, after=[unsent]).id
        assert Job.objects.get(pk=retrying).status == "retrying"
        helper.purge()
        ours = Job.objects.filter(pk__in=[sent, retrying, unsent, child])
        assert set(ours.values_list("status", flat=True)) == {"cancelled"}
        assert helper.engine.stats("default").scheduled == 0
        assert helper.advance(timedelta(hours=1)) == 0
        assert Job.objects.get(pk=outside).status == "scheduled"
    assert run_due_jobs() == 1  # the real prefix's own, after the block
    assert Job.objects.get(pk=outside).result == 2


@pytest.mark.parametrize("transactional", [
    pytest.param(False, marks=pytest.mark.django_db, id="testcase"),
    pytest.param(True, marks=pytest.mark.django_db(transaction=True), id="transactional")])
def test_run_due_jobs_runs_jobs_scheduled_by_jobs(project, delayq, transactional):  # noqa: F811
    """In a TestCase-style test the on-commit sends of the jobs' own schedule() never
    fire: run_due_jobs takes those jobs from the outbox too, as it does the test's."""
    schedule("tests.jobs.countdown", 3)
    assert delayq.run_due_jobs() == 4
    assert sorted(Job.objects.values_list("result", flat=True)) == [0, 1, 2, 3]
    assert delayq.run_due_jobs() == 0


@pytest.mark.django_db
def test_eager_runs_inline_on_commit(project, delayq_eager, django_capture_on_commit_callbacks):  # noqa: F811
    with django_capture_on_commit_callbacks(execute=True):
        handle = schedule("tests.jobs.add", 20, 22)
    job = Job.objects.get(pk=handle.id)
    assert (job.status, job.result, job.worker_id) == ("succeeded", 42, "eager")
    assert get_engine().inspect("default", handle.id).place == ""  # Redis never saw it


@pytest.mark.django_db
def test_eager_failure_raises_from_the_commit(project, delayq_eager,  # noqa: F811
                                             django_capture_on_commit_callbacks):
    with pytest.raises(ValueError, match="eager"), django_capture_on_commit_callbacks(
            execute=True):
        handle = schedule("tests.jobs_more.raise_value_error", "eager")
    job = Job.objects.get(pk=handle.id)
    assert (job.status, job.error_type, job.last_error) == ("dead", "builtins.ValueError", "eager")


@pytest.mark.django_db(transaction=True)
def test_eager_failure_raises_from_schedule_in_autocommit(project, delayq_eager):  # noqa: F811
    with pytest.raises(ValueError, match="alone"):
        schedule("tests.jobs_more.raise_value_error", "alone")
    with pytest.raises(ValueError, match="first"):  # schedule_many's batch: each job runs
        schedule_many("tests.jobs_more.raise_value_error", [JobSpec(args=["first"]),
                                                             JobSpec(args=["second"])])
    assert sorted(Job.objects.values_list("status", "last_error")) == [
        ("dead", "alone"), ("dead", "first"), ("dead", "second")]


@pytest.mark.django_db(transaction=True)
def test_eager_commit_runs_every_job_then_raises_the_first_failure(project, delayq_eager):  # noqa: F811
    with pytest.raises(ValueError, match="first"), transaction.atomic():
        handles = [schedule("tests.jobs.add", 1, 2),
                   schedule("tests.jobs_more.raise_value_error", "first"),
                   schedule("tests.jobs_more.raise_value_error", "second"),
                   schedule("tests.jobs.add", 3, 4)]
    assert [Job.objects.get(pk=h.id).status for h in handles] == [
        "succeeded", "dead", "dead", "succeeded"]
    with transaction.atomic():  # nothing left over from that commit
        ok = schedule("tests.jobs.add", 5, 6)
    assert ok.result == 11


@pytest.mark.django_db(transaction=True)
def test_an_eager_failure_is_raised_by_its_own_commit_only(project, delayq_eager):  # noqa: F811
    """A job run at a commit that schedules in autocommit, a user's on-commit callback
    that schedules, and the next commit see none of the commit's earlier failure."""
    seen: list[str] = []

    def schedules() -> None:
        schedule("tests.jobs.add", 1, 2)
        seen.append("ok")

    with pytest.raises(ValueError, match="first"), transaction.atomic():
        bad = schedule("tests.jobs_more.raise_value_error", "first")
        spawner = schedule("tests.jobs.countdown", 1)  # schedules once more, in autocommit
        in_own = schedule("tests.jobs_more.schedules_in_a_transaction", 2)
        transaction.on_commit(schedules)
        last = schedule("tests.jobs.add", 3, 4)
    assert (bad.status, spawner.status, in_own.status, last.status) == (
        "dead", "succeeded", "succeeded", "succeeded")
    assert seen == ["ok"]

    def stops() -> None:
        raise RuntimeError("a user's callback")

    with pytest.raises(RuntimeError), transaction.atomic():  # Django stops short of the
        schedule("tests.jobs_more.raise_value_error", "second")  # last eager callback
        transaction.on_commit(stops)
        schedule("tests.jobs.add", 5, 6)
    with transaction.atomic():
        ok = schedule("tests.jobs.add", 7, 8)  # raises nothing left from that commit
    assert ok.result == 15


@pytest.mark.django_db(transaction=True)
def test_eager_children_released_at_commit_raise_too(project, delayq_eager):  # noqa: F811
    with pytest.raises(ValueError, match="child"), transaction.atomic():
        parent = schedule("tests.jobs.add", 1, 2)
        failing = schedule("tests.jobs_more.raise_value_error", "child", after=[parent],
                           after_failure="run")
        sibling = schedule("tests.jobs.add", 3, 4, after=[parent], after_failure="run")
        parent.cancel()  # releases its children, which run at the commit
    assert [Job.objects.get(pk=h.id).status for h in (parent, failing, sibling)] == [
        "cancelled", "dead", "succeeded"]


@pytest.fixture
def lifecycle():  # type: ignore[no-untyped-def]
    """The lifecycle signals sent, as (name, their keyword arguments)."""
    seen: list[tuple[str, dict[str, object]]] = []
    receivers = {}
    for name in ("job_started", "job_succeeded", "job_retrying", "job_dead", "job_cancelled"):
        def receiver(sender, name=name, **kwargs):  # type: ignore[no-untyped-def]
            seen.append((name, kwargs))
        receivers[getattr(signals, name)] = receiver
    with connected(receivers):
        yield seen


def _sent(seen, job_id):  # type: ignore[no-untyped-def]
    return [(name, kw["attempt"], kw["worker_id"]) for name, kw in seen if kw["job_id"] == job_id]


@pytest.mark.django_db(transaction=True)
def test_eager_runs_send_the_lifecycle_signals_of_a_worker(project, delayq, lifecycle):  # noqa: F811
    """Each once, with the arguments run_due_jobs (a worker's settle path) sends; worker
    id "eager"; at the commit when scheduled in a transaction."""
    ran = schedule("tests.jobs.add", 1, 2)  # not eager: the worker's signals, to compare
    assert run_due_jobs() == 1
    failed = schedule("tests.jobs_more.raise_value_error", "worker", max_attempts=1)
    assert run_due_jobs() == 1
    project.DELAYQ = {**project.DELAYQ, "EAGER": True}
    ok = schedule("tests.jobs.add", 20, 22)
    with pytest.raises(ValueError, match="inline"):
        schedule("tests.jobs_more.raise_value_error", "inline")
    [bad_id] = Job.objects.filter(last_error="inline").values_list("pk", flat=True)
    assert _sent(lifecycle, ok.id) == [("job_started", 1, "eager"), ("job_succeeded", 1, "eager")]
    assert _sent(lifecycle, bad_id) == [("job_started", 1, "eager"), ("job_dead", 1, "eager")]
    by_job = {kw["job_id"]: {} for _, kw in lifecycle}
    for name, kw in lifecycle:
        by_job[kw["job_id"]][name] = kw
    for worker_run, eager_run in ((ran.id, ok.id), (failed.id, bad_id)):
        assert {n: set(kw) for n, kw in by_job[worker_run].items()} == {
            n: set(kw) for n, kw in by_job[eager_run].items()}
    assert by_job[ok.id]["job_succeeded"]["result"] == 42
    dead = by_job[bad_id]["job_dead"]
    assert (dead["error_type"], dead["error"]) == ("builtins.ValueError", "inline")
    assert dead["started_at"] == Job.objects.get(pk=bad_id).started_at
    with transaction.atomic():
        later = schedule("tests.jobs.add", 3, 4)
        assert _sent(lifecycle, later.id) == []  # runs at the commit
    assert _sent(lifecycle, later.id) == [("job_started", 1, "eager"),
                                          ("job_succeeded", 1, "eager")]


@pytest.mark.django_db
def test_eager_does_not_run_a_job_cancelled_before_the_commit(
        project, delayq_eager, django_capture_on_commit_callbacks):  # noqa: F811
    with django_capture_on_commit_callbacks(execute=True):
        handle = schedule("tests.jobs.add", 20, 22)
        handle.cancel()
    job = Job.objects.get(pk=handle.id)
    assert (job.status, job.result, job.started_at) == ("cancelled", None, None)


@pytest.mark.django_db
def test_eager_a_job_moved_before_its_commit_runs_at_the_commit(
        project, delayq_eager, django_capture_on_commit_callbacks):  # noqa: F811
    """Eager runs every job of the commit, due or not: a move there changes its row."""
    with django_capture_on_commit_callbacks(execute=True):
        later, now = (schedule("tests.jobs.add", i, 1, delay=3600) for i in range(2))
        assert reschedule(later.id, delay=60) is MoveOutcome.MOVED
        assert run_now(now.id) is MoveOutcome.MOVED
        assert abs((later.job.run_at - timezone.now()).total_seconds() - 60) < 30
    assert [(h.status, h.job.result) for h in (later, now)] == [("succeeded", 1), ("succeeded", 2)]
    assert get_engine().inspect("default", later.id).place == ""  # Redis never saw them
    assert reschedule(later.id, delay=60) is MoveOutcome.NOT_FOUND  # it finished


# -- a job that cancels itself (or another) while it runs: eager as run_due_jobs ---------

# worker id -> the job's handle.status during its run, and what its cancel() answered
STATUS_WHILE_RUNNING: dict[str, tuple[str, str]] = {}


def cancels_itself(fail: bool) -> str:
    """A job that cancels itself while it runs, then returns (or raises)."""
    ctx = current_job()
    assert ctx is not None
    status = JobHandle(ctx.id, ctx.queue).status
    STATUS_WHILE_RUNNING[ctx.worker_id] = (status, cancel(ctx.id).name)
    if fail:
        raise ValueError("failed after its cancel")
    return "ran"


def cancels_the_next(path: str) -> str:
    """A job that cancels the job of ``path`` that has not run yet (its row scheduled)."""
    [pending] = Job.objects.filter(callable_path=path, status="scheduled").values_list(
        "pk", flat=True)
    return cancel(pending).name


def replaces_itself(key: str) -> str:
    """A job holding ``key`` that schedules its replacement while it runs."""
    return schedule("tests.test_testing_helpers.plain", False, key=key,
                    on_conflict="replace").id


def plain(fail: bool) -> str:
    if fail:
        raise ValueError("plain failure")
    return "ran"


def _trace(seen, job_id):  # type: ignore[no-untyped-def]
    """The signals of ``job_id``, their worker id left out (``"testing"``, ``"eager"``)."""
    return [(name, kw.get("running"), kw.get("attempt"), kw.get("result"), kw.get("error"))
            for name, kw in seen if kw["job_id"] == job_id]


def _row(job_id):  # type: ignore[no-untyped-def]
    job = Job.objects.get(pk=job_id)
    return (job.status, job.attempts, job.worker_id in ("testing", "eager"), job.result,
            job.error_type, job.last_error, bool(job.traceback), job.cancel_requested,
            job.started_at is not None, job.finished_at is not None,
            list(JobAttempt.objects.filter(job_id=job_id).values_list(
                "number", "outcome", "error_type", "error")))


def _eager(project):  # type: ignore[no-untyped-def]
    project.DELAYQ = {**project.DELAYQ, "EAGER": True}


@pytest.fixture
def own_jobs(project):  # type: ignore[no-untyped-def]
    project.DELAYQ = {**project.DELAYQ, "ALLOWED_CALLABLES": [
        *project.DELAYQ["ALLOWED_CALLABLES"], "tests.test_testing_helpers"]}
    STATUS_WHILE_RUNNING.clear()
    return project


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("path", "fail"), [("cancels_itself", False), ("cancels_itself", True),
                                            ("plain", False), ("plain", True)])
def test_an_eager_run_ends_as_a_worker_run_does(own_jobs, delayq, lifecycle, path, fail):  # noqa: F811
    """A job that cancels itself while it runs: a worker's cancel of a running job
    (``job_cancelled``, running=True), then its success (``succeeded``) or, failed, not
    retried (``cancelled``, the worker's second ``job_cancelled``): one final signal.
    Eager mode: the same row and signals, its row ``running`` during the run, and no
    exception raised for a job that ended cancelled. Plain runs: unchanged."""
    path = "tests.test_testing_helpers." + path
    by_worker = schedule(path, fail, max_attempts=3 if path.endswith("itself") else 1)
    assert run_due_jobs() == 1
    _eager(own_jobs)
    if fail and path.endswith("plain"):
        with pytest.raises(ValueError, match="plain failure"):
            schedule(path, fail, max_attempts=1)
        [eager_id] = Job.objects.exclude(pk=by_worker.id).values_list("pk", flat=True)
    else:
        eager_id = schedule(path, fail, max_attempts=3).id
    assert _trace(lifecycle, eager_id) == _trace(lifecycle, by_worker.id)
    assert _row(eager_id) == _row(by_worker.id)
    assert Job.objects.get(pk=eager_id).worker_id == "eager"
    if path.endswith("itself"):
        assert STATUS_WHILE_RUNNING["eager"] == ("running", "ALREADY_RUNNING")
        assert STATUS_WHILE_RUNNING["testing"][1] == "ALREADY_RUNNING"
        assert [name for name, *_ in _trace(lifecycle, eager_id)] == [
            "job_started", "job_cancelled", "job_cancelled" if fail else "job_succeeded"]


@pytest.mark.django_db(transaction=True)
def test_an_eager_job_cancelling_one_not_run_yet_as_a_worker(own_jobs, delayq, lifecycle):  # noqa: F811
    """The job it cancels never runs: cancelled (``running=False``), never started."""
    other = "tests.test_testing_helpers.plain"
    with transaction.atomic():  # claimed first: its priority
        by_worker = schedule("tests.test_testing_helpers.cancels_the_next", other, priority=10)
        worker_other = schedule(other, False)
    assert run_due_jobs() == 1  # the cancelled job is never claimed
    _eager(own_jobs)
    with transaction.atomic():  # run at the commit in this order
        eager = schedule("tests.test_testing_helpers.cancels_the_next", other)
        eager_other = schedule(other, False)
    assert _trace(lifecycle, eager_other.id) == _trace(lifecycle, worker_other.id) == [
        ("job_cancelled", False, None, None, None)]
    assert _row(eager_other.id) == _row(worker_other.id)
    assert _row(eager_other.id)[:2] == ("cancelled", 0)
    assert _trace(lifecycle, eager.id) == _trace(lifecycle, by_worker.id)
    assert _row(eager.id) == _row(by_worker.id)
    assert Job.objects.get(pk=eager.id).result == "CANCELLED"


@pytest.mark.django_db(transaction=True)
def test_an_eager_job_replaced_while_it_runs_runs_on_as_with_a_worker(own_jobs, delayq,  # noqa: F811
                                                                      lifecycle):
    """``on_conflict="replace"`` of a running job lets it run on (no cancel signal); its
    replacement takes the key and runs."""
    path = "tests.test_testing_helpers.replaces_itself"
    by_worker = schedule(path, "w", key="w", on_conflict="replace")
    assert run_due_jobs() == 2
    _eager(own_jobs)
    eager = schedule(path, "e", key="e", on_conflict="replace")
    def ran(job_id):  # type: ignore[no-untyped-def]  # the results: the replacements' ids
        return [(name, running) for name, running, *_ in _trace(lifecycle, job_id)]
    assert ran(eager.id) == ran(by_worker.id)
    assert [name for name, *_ in _trace(lifecycle, eager.id)] == ["job_started", "job_succeeded"]
    assert _row(eager.id)[:2] == _row(by_worker.id)[:2] == ("succeeded", 1)
    for handle in (by_worker, eager):
        replacement = Job.objects.get(pk=handle.job.result)
        assert (replacement.status, replacement.result) == ("succeeded", "ran")



@pytest.mark.django_db(transaction=True)
def test_an_eager_job_raising_a_base_exception_ends_dead_and_it_propagates(
        project, delayq_eager) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """A ``SystemExit`` from a job in eager mode: its row ends ``dead`` (as a worker
    records it), never left ``running``, and the exception goes on up."""
    with pytest.raises(SystemExit):
        schedule("tests.jobs_more.exits")
    row = Job.objects.get()
    assert (row.status, row.error_type) == ("dead", "builtins.SystemExit")


def due_at_seen() -> str:
    """The running job's ``due_at``, as the job sees it."""
    ctx = current_job()
    assert ctx is not None
    return ctx.due_at.isoformat()


@pytest.mark.django_db(transaction=True)
def test_an_eager_run_without_use_tz_hands_out_aware_times(own_jobs, delayq, lifecycle):  # noqa: F811
    """``USE_TZ = False``: the rows hold naive local times, but what a job and the
    lifecycle signals are given is aware, as from a worker (signals.md: "aware
    datetimes"), and the same instants as the row's."""
    own_jobs.USE_TZ, own_jobs.TIME_ZONE = False, "Europe/Berlin"
    _eager(own_jobs)
    ran = schedule("tests.test_testing_helpers.due_at_seen")
    with pytest.raises(ValueError, match="plain failure"):
        schedule("tests.test_testing_helpers.plain", True, max_attempts=1)
    row = Job.objects.get(pk=ran.id)
    zone = timezone.get_default_timezone()
    assert datetime.fromisoformat(row.result) == row.run_at.replace(tzinfo=zone)
    for name, kw in lifecycle:
        for field in ("due_at", "started_at"):
            if field in kw:
                assert kw[field].tzinfo is not None, (name, field)
                stored = Job.objects.get(pk=kw["job_id"])
                assert kw[field] == getattr(stored, field.replace("due_at", "run_at")
                                            ).replace(tzinfo=zone), (name, field)
    assert {name for name, _ in lifecycle} >= {"job_started", "job_dead", "job_succeeded"}
