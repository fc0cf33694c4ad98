"""The Django Tasks backend on a real Redis: django.tasks (Django 6) or django_tasks (5.2)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.utils import timezone

from django_delayq import compat
from django_delayq.core import registry
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.management.command_options import parse_queues
from django_delayq.models import Job, JobStatus
from django_delayq.testing import run_due_jobs, run_worker
from tests.helpers import burst, connected

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(compat.tasks is None, reason="no Django Tasks framework")]

BACKEND = "django_delayq.backends.DelayQBackend"


@pytest.fixture
def tasks_settings(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "ALLOWED_CALLABLES": ["tests.jobs", "tests.jobs_tasks"]}
    delayq_settings.TASKS = {"default": {"BACKEND": BACKEND,
                                         "OPTIONS": {"MAX_ATTEMPTS": 3, "BACKOFF": [0, 0]}}}
    return delayq_settings


@pytest.fixture
def jt(tasks_settings):  # type: ignore[no-untyped-def]
    from tests import jobs_tasks

    return jobs_tasks


def Status():  # type: ignore[no-untyped-def]  # noqa: N802
    return compat.tasks.TaskResultStatus


def test_backend_declares_what_it_supports(jt):
    backend = compat.tasks.task_backends["default"]
    assert type(backend).__module__ + "." + type(backend).__name__ == BACKEND
    assert backend.supports_defer is True
    assert backend.supports_get_result is True
    assert backend.supports_async_task is True
    assert backend.supports_priority is True
    with pytest.raises(compat.InvalidTask, match="priority"):
        jt.add.using(priority=101)


def test_priority_is_stored_sent_to_redis_and_read_back(jt):
    at = timezone.now() - timedelta(seconds=1)
    low = jt.add.using(run_after=at - timedelta(seconds=1)).enqueue(1, 1)
    high = jt.add.using(priority=40, run_after=at).enqueue(2, 2)
    assert Job.objects.get(pk=high.id).priority == 40
    assert jt.add.get_result(high.id) == high and high.task.priority == 40
    claimed = get_engine().claim("default", 10, 60_000).jobs
    assert [j.id for j in claimed] == [high.id, low.id]  # higher priority first


def test_enqueue_runs_on_the_engine_and_get_result_reads_the_audit_row(jt):
    result = jt.add.enqueue(2, 3)
    assert result.status == Status().READY
    assert result.backend == "default"
    row = Job.objects.get(pk=result.id)
    assert (row.callable_path, row.queue, row.args) == ("tests.jobs_tasks.add", "default", [2, 3])
    assert get_engine().inspect("default", result.id).place == "pending"
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018
    assert run_due_jobs() == 1
    result.refresh()
    assert result.status == Status().SUCCESSFUL
    assert result.return_value == 5
    assert result.worker_ids == ["testing"] and result.attempts == 1
    assert result.errors == []
    assert result.enqueued_at <= result.started_at <= result.finished_at
    again = jt.add.get_result(result.id)
    assert (again.id, again.return_value, again.task.func) == (result.id, 5, jt.add.func)


def test_failed_task_lists_every_attempts_error_and_worker(jt):
    result = jt.fail.enqueue("nope")
    assert run_due_jobs() == 3  # MAX_ATTEMPTS 3, BACKOFF [0, 0]: retried at once
    result.refresh()
    assert result.status == Status().FAILED
    assert result.is_finished
    assert len(result.errors) == 3 and len(result.worker_ids) == 3
    assert all(e.exception_class is jt.CustomError for e in result.errors)
    assert "nope" in result.errors[-1].traceback
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018
    assert Job.objects.get(pk=result.id).status == JobStatus.DEAD


def test_a_raising_task_is_failed_after_its_one_run_by_default(jt, tasks_settings):
    # What Django's documentation leads a user to expect: the exception makes it FAILED.
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND}}
    result = jt.fail.enqueue("no second chance")
    assert Job.objects.get(pk=result.id).max_attempts == 1
    assert run_worker() == 1  # a real worker, burst mode
    result.refresh()
    assert result.status == Status().FAILED and result.is_finished
    assert result.attempts == 1 and len(result.worker_ids) == 1
    assert [e.exception_class for e in result.errors] == [jt.CustomError]


def test_retries_are_opt_in_through_the_backend_options(jt, tasks_settings):
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND,
                                        "OPTIONS": {"MAX_ATTEMPTS": 2, "BACKOFF": [0]}}}
    result = jt.fail.enqueue("twice")
    assert run_worker() == 2
    result.refresh()
    assert result.status == Status().FAILED and result.attempts == 2
    assert len(result.errors) == 2


@pytest.mark.parametrize("options, named", [
    ({"MAX_ATTEMPTS": 0}, "['MAX_ATTEMPTS']: max_attempts must be an integer from 1 to 1000, "
                          "got 0"),
    ({"MAX_ATTEMPTS": "3"}, "['MAX_ATTEMPTS']: max_attempts must be an integer from 1 to 1000, "
                            "got '3'"),
    ({"MAX_ATTEMPTS": True}, "['MAX_ATTEMPTS']: max_attempts must be an integer from 1 to 1000, "
                             "got True"),
    ({"MAX_ATTEMPTS": 1001}, "['MAX_ATTEMPTS']: max_attempts must be an integer from 1 to 1000, "
                             "got 1001"),  # as schedule() refuses it, when the backend is built
    # None is no "use DELAYQ's default" here (a task's default is one attempt)
    ({"MAX_ATTEMPTS": None}, "['MAX_ATTEMPTS']: max_attempts must be an integer from 1 to 1000, "
                             "got None"),
    ({"MAX_ATTEMPTS": None, "BACKOFF": [1, 2]}, "['MAX_ATTEMPTS']: max_attempts must be an "
                                                "integer from 1 to 1000, got None"),
    ({"MAX_ATTEMPTS": 3, "BACKOFF": "sometimes"}, "['BACKOFF']: backoff 'sometimes' is not valid"),
    ({"MAX_ATTEMPTS": 3, "BACKOFF": [-1]}, "['BACKOFF']: backoff [-1] is not valid"),
    ({"BACKOFF": [60]}, "has no effect with one attempt"),
])
def test_bad_retry_options_are_improperly_configured(tasks_settings, options, named):
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": options}}
    with pytest.raises(ImproperlyConfigured, match="TASKS\\['default'\\]") as info:
        compat.tasks.task_backends["default"]  # noqa: B018
    assert named in str(info.value)


def test_retrying_task_is_ready_again_with_its_first_error(jt, tasks_settings):
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND,
                                        "OPTIONS": {"MAX_ATTEMPTS": 2, "BACKOFF": [3600]}}}
    result = jt.fail.enqueue("once")
    assert run_due_jobs() == 1
    result.refresh()
    assert result.status == Status().READY  # retrying: "ready to be executed again"
    assert [e.exception_class for e in result.errors] == [jt.CustomError]
    assert result.finished_at is None


def test_takes_context_gets_the_attempt_number_and_running_result(jt):
    assert registry.resolve("tests.jobs_tasks.flaky") is not jt.flaky.func  # wrapped
    result = jt.flaky.enqueue(3)
    assert run_due_jobs() == 3
    result.refresh()
    assert result.status == Status().SUCCESSFUL, result.errors
    seen = result.return_value
    assert seen["attempt"] == 3 and seen["id"] == result.id
    assert seen["worker_ids"] == ["testing"] * 3
    assert seen["errors"] == 2
    assert seen["status"] == Status().RUNNING
    assert [str(e.exception_class.__name__) for e in result.errors] == ["ValueError"] * 2


def test_run_after_aware_datetime_defers_the_task(jt):
    at = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    result = jt.add.using(run_after=at).enqueue(1, 1)
    loc = get_engine().inspect("default", result.id)
    assert loc.place == "pending" and loc.score_ms == int(at.timestamp() * 1000)
    assert run_due_jobs() == 0
    assert run_due_jobs(now=at - timedelta(seconds=1)) == 0
    assert run_due_jobs(now=at) == 1
    result.refresh()
    assert result.return_value == 2


def test_run_after_timedelta_counts_from_enqueue(jt):
    before = timezone.now()
    result = jt.add.using(run_after=timedelta(minutes=5)).enqueue(1, 2)
    row = Job.objects.get(pk=result.id)
    assert before + timedelta(minutes=5) <= row.run_at <= timezone.now() + timedelta(minutes=5)
    assert run_due_jobs() == 0
    assert run_due_jobs(now=timezone.now() + timedelta(minutes=6)) == 1
    assert jt.add.get_result(result.id).return_value == 3


def test_bad_run_after_and_queue_are_refused_when_enqueued(jt):
    with pytest.raises(compat.InvalidTask, match="aware"):
        jt.add.using(run_after=datetime(2030, 1, 1)).enqueue(1, 1)
    with pytest.raises(compat.InvalidTask, match="negative"):
        jt.add.using(run_after=timedelta(seconds=-1))
    with pytest.raises(compat.InvalidTask, match="QUEUES"):
        jt.add.using(queue_name="nope")
    assert Job.objects.count() == 0


def test_queue_name_and_async_tasks(jt):
    r1 = jt.on_emails.enqueue({"x": 1})
    r2 = jt.async_mul.enqueue(3, 4)
    assert Job.objects.get(pk=r1.id).queue == "emails"
    assert run_due_jobs() == 2
    assert jt.on_emails.get_result(r1.id).return_value == {"x": 1}
    assert jt.async_mul.get_result(r2.id).return_value == 12


def test_enqueue_in_a_transaction_reaches_redis_on_commit(jt):
    with transaction.atomic():
        result = jt.add.enqueue(4, 4)
        assert get_engine().inspect("default", result.id).place == ""
        assert jt.add.get_result(result.id).status == Status().READY
    assert get_engine().inspect("default", result.id).place == "pending"


def test_unknown_result_id_and_task_enqueued_signal(jt):
    with pytest.raises(compat.TaskResultDoesNotExist):
        jt.add.get_result("01NOTAJOB")
    seen = []

    def receiver(sender, task_result, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((sender.__name__, task_result.id))

    compat.task_signals.task_enqueued.connect(receiver)
    try:
        result = jt.add.enqueue(0, 0)
    finally:
        compat.task_signals.task_enqueued.disconnect(receiver)
    assert seen == [("DelayQBackend", result.id)]


def test_a_real_worker_runs_task_functions(jt):
    results = [jt.add.enqueue(i, i) for i in range(3)]
    assert run_worker(concurrency=2) == 3
    for i, result in enumerate(results):
        result.refresh()
        assert result.status == Status().SUCCESSFUL
        assert result.return_value == 2 * i
        assert result.worker_ids[0].count(":") == 2  # host:pid:suffix


def test_errors_carry_the_recorded_exception_class_path(jt):
    result = jt.fail.enqueue("nope")
    assert run_due_jobs() == 3
    result.refresh()
    assert [e.exception_class_path for e in result.errors] == [
        "tests.jobs_tasks.CustomError"] * 3
    assert result.errors[-1].traceback.rstrip().splitlines()[-1] == (
        "tests.jobs_tasks.CustomError: nope")


def test_a_lost_lease_is_a_lease_lost_error(jt):
    from django_delayq.core.conf import get_settings
    from django_delayq.exceptions import LeaseLost
    from django_delayq.worker.audit import AuditWriter
    from django_delayq.worker.housekeeping import LeaseRecovery
    from django_delayq.worker.outcome import LOST_LEASE

    result = jt.add.enqueue(1, 2)
    engine = get_engine()
    claimed = engine.claim("default", 10, 50).jobs
    assert [j.id for j in claimed] == [result.id]
    engine.mark_started(claimed)  # its run started: a lost lease of it is an attempt
    audit = AuditWriter()
    recovery = LeaseRecovery(engine, get_settings(), audit)
    deadline = time.monotonic() + 10
    while not Job.objects.filter(pk=result.id, status=JobStatus.RETRYING).exists():
        assert time.monotonic() < deadline, "the 50 ms lease was never taken back"
        time.sleep(0.02)
        recovery.recover("default")  # takes the lease back once it expired
        audit.flush()
    result.refresh()
    assert result.status == Status().READY
    [error] = result.errors
    assert (error.exception_class_path, error.exception_class) == (
        "django_delayq.exceptions.LeaseLost", LeaseLost)
    assert error.traceback == "django_delayq.exceptions.LeaseLost: %s" % LOST_LEASE


def test_eager_failure_is_an_error_of_its_exception_class(jt, tasks_settings):
    tasks_settings.DELAYQ = {**tasks_settings.DELAYQ, "EAGER": True}
    result = jt.fail.enqueue("inline")  # runs after commit; no raise, as Django's
    result.refresh()  # ImmediateBackend: the failure is the result's
    assert result.status == Status().FAILED
    [error] = result.errors
    assert error.exception_class is jt.CustomError
    assert error.traceback.rstrip().endswith("CustomError: inline")


@pytest.fixture
def eager_signals(jt, tasks_settings):  # type: ignore[no-untyped-def]
    """DELAYQ["EAGER"] on, one run per task; yields the Tasks and lifecycle signals sent:
    (name, job id, status or attempt, worker id)."""
    from django_delayq import signals

    tasks_settings.DELAYQ = {**tasks_settings.DELAYQ, "EAGER": True}
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND}}
    seen: list[tuple[str, str, object, object]] = []
    receivers = {}
    for name in ("task_enqueued", "task_started", "task_finished"):
        def on_task(sender, task_result, name=name, **kwargs):  # type: ignore[no-untyped-def]
            seen.append((name, task_result.id, task_result.status, task_result.worker_ids))
        receivers[getattr(compat.task_signals, name)] = on_task
    for name in ("job_started", "job_succeeded", "job_dead"):
        def on_job(sender, job_id, name=name, **kwargs):  # type: ignore[no-untyped-def]
            seen.append((name, job_id, kwargs["attempt"], kwargs["worker_id"]))
        receivers[getattr(signals, name)] = on_job
    with connected(receivers):
        yield seen


def test_eager_enqueue_in_autocommit_returns_the_finished_run(jt, eager_signals):
    """As Django's ImmediateBackend: SUCCESSFUL with its value, or FAILED with its error,
    straight from enqueue(); the same as get_result() reads."""
    ok = jt.add.enqueue(1, 2)
    assert (ok.status, ok.return_value, ok.errors, ok.worker_ids) == (
        Status().SUCCESSFUL, 3, [], ["eager"])
    assert ok.finished_at is not None and jt.add.get_result(ok.id) == ok
    bad = jt.fail.enqueue("at once")
    assert bad.status == Status().FAILED
    [error] = bad.errors
    assert error.exception_class is jt.CustomError
    assert error.traceback.rstrip().endswith("CustomError: at once")
    assert jt.fail.get_result(bad.id) == bad


def test_eager_runs_send_each_lifecycle_and_tasks_signal_once(jt, eager_signals):
    ok, bad = jt.add.enqueue(2, 3), jt.fail.enqueue("boom")
    R, S, F = Status().RUNNING, Status().SUCCESSFUL, Status().FAILED  # noqa: N806
    for result, end, job_end in ((ok, S, "job_succeeded"), (bad, F, "job_dead")):
        mine = [s for s in eager_signals if s[1] == result.id]
        tasks = [s for s in mine if s[0].startswith("task_")]
        assert tasks == [("task_enqueued", result.id, Status().READY, []),
                         ("task_started", result.id, R, ["eager"]),
                         ("task_finished", result.id, end, ["eager"])]  # ImmediateBackend's order
        assert [s for s in mine if s[0].startswith("job_")] == [
            ("job_started", result.id, 1, "eager"), (job_end, result.id, 1, "eager")]


def test_eager_enqueue_in_a_transaction_runs_at_its_commit(jt, eager_signals):
    """Django's ImmediateBackend runs the task inside the transaction; here it runs at the
    commit, like every eager job: READY until then, refresh() shows the outcome."""
    with transaction.atomic():
        result = jt.add.enqueue(4, 5)
        assert result.status == Status().READY
        assert [s[0] for s in eager_signals] == ["task_enqueued"]
    assert [s[0] for s in eager_signals if s[0] != "job_started"] == [
        "task_enqueued", "task_started", "task_finished", "job_succeeded"]
    assert result.status == Status().READY
    result.refresh()
    assert (result.status, result.return_value) == (Status().SUCCESSFUL, 9)


# -- Django's contract: results, signals, errors -------------------------------------------

def test_enqueue_returns_what_get_result_reads(jt, tasks_settings):
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND},
                            "other": {"BACKEND": BACKEND, "QUEUES": ["default", "emails"]}}
    result = jt.add.enqueue(1, 2)
    assert jt.add.get_result(result.id) == result  # enqueued_at is the stored one
    at = timezone.now() + timedelta(hours=1)
    later = jt.add.using(run_after=at).enqueue(3, 4)
    again = jt.add.get_result(later.id)
    assert again == later and again.task.run_after == at
    # Read through another DelayQ backend, a result names the backend that enqueued it
    # (kept on the row: Job.task_backend).
    read = compat.tasks.task_backends["other"].get_result(result.id)
    assert read == result and (read.backend, read.task.backend) == ("default", "default")
    other = jt.add.using(backend="other", queue_name="emails").enqueue(5, 6)
    assert (other.backend, other.task.backend, other.task.queue_name) == ("other", "other",
                                                                           "emails")
    assert run_worker() == 2
    other.refresh()  # through the result's own backend: it keeps its alias
    assert other.return_value == 11 and other.task.backend == "other"
    # ...and get_result() through any DelayQ backend names the enqueuing one
    assert Job.objects.get(pk=other.id).task_backend == "other"
    for alias in ("default", "other"):
        read = compat.tasks.task_backends[alias].get_result(other.id)
        assert (read.backend, read.task.backend) == ("other", "other")
    # run_after is the due time asked (scheduled_for), also once the task has started
    assert run_due_jobs(now=at) == 1
    assert jt.add.get_result(later.id).task.run_after == at
    assert jt.add.get_result(later.id).status == Status().SUCCESSFUL


def test_timedelta_run_after_is_stored_as_its_due_time(jt):
    result = jt.add.using(run_after=timedelta(minutes=5)).enqueue(1, 1)
    assert result.task.run_after == Job.objects.get(pk=result.id).run_at
    assert jt.add.get_result(result.id) == result


def test_run_after_follows_a_reschedule_before_the_first_start(jt):
    """docs/tasks.md: the result's task says when it runs, after ``reschedule()`` too."""
    from django_delayq import reschedule, run_now

    result = jt.add.using(run_after=timedelta(hours=1)).enqueue(2, 2)
    reschedule(result.id, delay=7200)
    result.refresh()
    row = Job.objects.get(pk=result.id)
    assert result.task.run_after == row.run_at == row.scheduled_for
    assert timedelta(minutes=119) < row.run_at - timezone.now() <= timedelta(hours=2)
    assert run_due_jobs(now=timezone.now() + timedelta(hours=1, minutes=1)) == 0
    assert run_due_jobs(now=row.run_at + timedelta(seconds=1)) == 1
    assert jt.add.get_result(result.id).task.run_after == row.run_at  # kept once started
    plain = jt.add.enqueue(1, 1)  # no run_after; run now: due when it was moved
    assert plain.task.run_after is None and run_now(plain.id).name == "MOVED"
    plain.refresh()
    assert plain.task.run_after == Job.objects.get(pk=plain.id).run_at is not None


def test_task_started_and_finished_are_sent_and_logged(jt, tasks_settings, caplog):
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND}}
    log_name = compat.task_signals.logger.name  # django.tasks (django_tasks: the backport)
    seen: list[tuple[str, str, object]] = []

    def started(sender, task_result, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(("started", task_result.id, task_result.status))

    def finished(sender, task_result, **kwargs):  # type: ignore[no-untyped-def]
        value = (task_result.return_value if task_result.status == Status().SUCCESSFUL
                 else [e.exception_class for e in task_result.errors])
        seen.append(("finished", task_result.id, (task_result.status, value)))

    compat.task_signals.task_started.connect(started)
    compat.task_signals.task_finished.connect(finished)
    try:
        with caplog.at_level("DEBUG", logger=log_name):
            ok, bad = jt.add.enqueue(2, 3), jt.fail.enqueue("boom")
            assert run_worker() == 2
    finally:
        compat.task_signals.task_started.disconnect(started)
        compat.task_signals.task_finished.disconnect(finished)
    assert [s for s in seen if s[1] == ok.id] == [
        ("started", ok.id, Status().RUNNING), ("finished", ok.id, (Status().SUCCESSFUL, 5))]
    assert [s for s in seen if s[1] == bad.id] == [
        ("started", bad.id, Status().RUNNING),
        ("finished", bad.id, (Status().FAILED, [jt.CustomError]))]
    lines = [r.getMessage() for r in caplog.records if r.name == log_name]
    for state, result in [("RUNNING", ok), ("SUCCESSFUL", ok), ("RUNNING", bad),
                          ("FAILED", bad)]:
        assert any(result.id in line and "state=%s" % state in line for line in lines), lines


def test_non_json_arguments_are_a_type_error(jt):
    with pytest.raises(TypeError, match="Unsupported type"):
        jt.add.enqueue(datetime.now(), 1)
    with pytest.raises(TypeError):
        jt.add.enqueue(1, b=object())
    assert Job.objects.count() == 0


def test_a_non_json_return_value_fails_the_task_with_a_type_error(jt, tasks_settings):
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND}}
    result = jt.returns_object.enqueue()
    assert run_worker() == 1
    result.refresh()
    assert result.status == Status().FAILED
    [error] = result.errors
    assert error.exception_class is TypeError
    assert "Unsupported type" in error.traceback


def test_a_quick_retry_sees_the_previous_error(jt, tasks_settings):
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND,
                                        "OPTIONS": {"MAX_ATTEMPTS": 2, "BACKOFF": [0]}}}
    result = jt.flaky.enqueue(2)
    assert run_worker() == 2  # a real worker: attempt rows are written in batches
    result.refresh()
    assert result.status == Status().SUCCESSFUL, result.errors
    assert result.return_value["errors"] == 1
    assert result.return_value["attempt"] == 2
    assert len(result.return_value["worker_ids"]) == 2


def test_keyword_arguments_may_be_named_like_scheduling_options(jt):
    values = {"fn": 1, "delay": 2, "at": 3, "queue": 4, "max_attempts": 5, "backoff": 6, "key": 7}
    result = jt.named_like_options.enqueue(**values)
    assert Job.objects.get(pk=result.id).kwargs == values
    assert run_due_jobs() == 1
    result.refresh()
    assert result.return_value == [1, 2, 3, 4, 5, 6, 7]


def test_empty_backend_queues_let_any_queue_name_through(jt, tasks_settings):
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": []}}
    task = jt.add.using(queue_name="anything")  # Django's rule: QUEUES [] checks no name
    assert task.queue_name == "anything"
    result = task.enqueue(1, 1)  # DELAYQ["QUEUES"] does not list it: allowed all the same
    assert Job.objects.get(pk=result.id).queue == "anything"
    with pytest.raises(compat.InvalidTask, match="queue '\\{x\\}' is not a queue name"):
        jt.add.using(queue_name="{x}").enqueue(1, 1)  # still a name Redis keys can hold
    assert burst(queues=("default",)) == 0 and result.status == Status().READY
    call_command("delayq_worker", "--queues", "anything", "--burst", "--concurrency", "1",
                 stdout=StringIO(), stderr=StringIO())
    result.refresh()
    assert (result.status, result.return_value) == (Status().SUCCESSFUL, 2)
    assert jt.on_emails.enqueue(1).task.queue_name == "emails"
    with pytest.raises(CommandError, match="not queue names"):
        parse_queues("a{b}", get_settings())
    # Named like shard 1 of a queue (q#1: engine/shard_map.py), its jobs would land in that
    # shard's keys and be set aside there as another queue's: refused, here and by a worker.
    with pytest.raises(compat.InvalidTask, match="queue 'default#1' is not a queue name"):
        jt.add.using(queue_name="default#1").enqueue(1, 1)
    with pytest.raises(CommandError, match="not queue names: \\['hot#12'\\]"):
        parse_queues("anything,hot#12", get_settings())
    assert parse_queues("a#b,#1x", get_settings()) == ("a#b", "#1x")  # a '#' alone is fine


def test_without_backend_queues_delayq_queues_are_the_valid_ones(jt):
    with pytest.raises(compat.InvalidTask, match="DELAYQ\\['QUEUES'\\]"):
        jt.add.using(queue_name="anything")
    with pytest.raises(CommandError, match="unknown queue"):  # no worker for such a queue
        parse_queues("anything", get_settings())


def test_task_arguments_are_bound_to_the_function_when_enqueued(jt):
    with pytest.raises(compat.InvalidTask, match="missing a required argument: 'b'"):
        jt.add.enqueue(1)
    with pytest.raises(compat.InvalidTask, match="unexpected keyword argument 'c'"):
        jt.add.enqueue(1, 2, c=3)
    assert Job.objects.count() == 0


def test_a_lost_lease_not_written_yet_is_seen_by_the_next_attempt(jt):
    """Lease recovery sends ``job_retrying`` with no callable (``callable_path=""``); its
    attempt row comes with the recovering worker's next audit flush. A next attempt that
    starts before it still sees the ``LeaseLost``, with the row's worker for it."""
    from django_delayq import signals
    from django_delayq.tasks_results import live_result
    from django_delayq.worker.outcome import LEASE_LOST, LOST_LEASE

    result = jt.flaky.enqueue(2)
    Job.objects.filter(pk=result.id).update(attempts=1, worker_id="victim:abcdef")
    signals.send(signals.job_retrying, job_id=result.id, queue="default", callable_path="",
                 attempt=1, worker_id="", error=LOST_LEASE, error_type=LEASE_LOST,
                 retry_at=timezone.now())
    running = live_result(jt.flaky, result.id, 2, "rescuer:012345", timezone.now(),
                          Status().RUNNING)
    assert [e.exception_class_path for e in running.errors] == [LEASE_LOST]
    assert running.worker_ids == ["victim:abcdef", "rescuer:012345"]


def test_a_lost_attempt_not_written_yet_keeps_its_start_for_the_next_attempt(jt):
    """The worker that takes a lease back starts the next attempt before its audit writer
    has written the lost attempt's row: that attempt's context still has the lost one's
    start (copied from the job's row by the recovery) as its ``started_at``, as it has its
    worker. The writer is never flushed here: the row is not written."""
    from django_delayq.core.conf import get_settings
    from django_delayq.models import JobAttempt
    from django_delayq.tasks_results import live_result
    from django_delayq.worker.audit import AuditWriter
    from django_delayq.worker.housekeeping import LeaseRecovery

    result = jt.flaky.enqueue(2)
    engine = get_engine()
    claimed = engine.claim("default", 10, 50).jobs
    assert [j.id for j in claimed] == [result.id]
    engine.mark_started(claimed)
    first_start = timezone.now() - timedelta(seconds=4)  # the victim's start, on the row
    Job.objects.filter(pk=result.id).update(attempts=1, started_at=first_start,
                                            worker_id="victim:abcdef", status=JobStatus.RUNNING)
    recovery = LeaseRecovery(engine, get_settings(), AuditWriter())
    deadline = time.monotonic() + 10
    while result.id not in _recent_ids():  # job_retrying, remembered
        assert time.monotonic() < deadline, "the 50 ms lease was never taken back"
        time.sleep(0.02)
        recovery.recover("default")
    assert not JobAttempt.objects.filter(job_id=result.id).exists()
    now = timezone.now()
    running = live_result(jt.flaky, result.id, 2, "rescuer:012345", now, Status().RUNNING)
    assert running.errors[0].exception_class_path == "django_delayq.exceptions.LeaseLost"
    assert running.worker_ids == ["victim:abcdef", "rescuer:012345"]
    assert (running.started_at, running.last_attempted_at) == (first_start, now)
    # get_result() in this process, the rescuer's start on the row: the same start
    Job.objects.filter(pk=result.id).update(attempts=2, started_at=now)
    result.refresh()
    assert (result.started_at, result.last_attempted_at) == (first_start, now)


def _recent_ids() -> set[str]:
    from django_delayq import tasks_results

    with tasks_results._recent_lock:
        return set(tasks_results._recent)


def test_remembered_lost_leases_go_when_their_jobs_end(jt):
    """Lease recovery names no callable (``callable_path=""``), so the tasks cache keeps
    any recovered job's lost attempt until its row is written: it drops it when the job
    ends here, task or not (succeeded, dead by recovery, cancelled, expired)."""
    from django_delayq import cancel, schedule, signals, tasks_results
    from django_delayq.worker.outcome import LEASE_LOST, LOST_LEASE

    plain = schedule("tests.jobs.noop")
    dead, cancelled = (schedule("tests.jobs.noop", delay=3600) for _ in range(2))
    for handle in (plain, dead, cancelled):
        signals.send(signals.job_retrying, job_id=handle.id, queue="default",
                     callable_path="", attempt=1, worker_id="", error=LOST_LEASE,
                     error_type=LEASE_LOST, retry_at=timezone.now())
        assert handle.id in tasks_results._recent
    assert run_due_jobs() == 1  # plain: job_succeeded, callable_path "tests.jobs.noop"
    assert plain.id not in tasks_results._recent
    # a lost last attempt: recovery's job_dead names no callable either
    signals.send(signals.job_dead, job_id=dead.id, queue="default", callable_path="",
                 attempt=2, worker_id="", error=LOST_LEASE, error_type=LEASE_LOST)
    assert dead.id not in tasks_results._recent
    cancel(cancelled.id)  # job_cancelled
    assert cancelled.id not in tasks_results._recent
    expired = schedule("tests.jobs.noop", delay=3600)
    signals.send(signals.job_retrying, job_id=expired.id, queue="default", callable_path="",
                 attempt=1, worker_id="", error=LOST_LEASE, error_type=LEASE_LOST,
                 retry_at=timezone.now())
    signals.send(signals.job_expired, job_id=expired.id, queue="default",
                 callable_path="tests.jobs.noop", attempts=1, worker_id="w",
                 due_at=timezone.now(), expires_at=timezone.now())
    assert expired.id not in tasks_results._recent
