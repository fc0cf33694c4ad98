"""Hostile and broken payloads never stop a worker, and Redis never decides what runs.

Each case runs a real (in-process) worker over input planted the way an attacker with
write access to Redis, or a bad deploy, would: an envelope written into the queue's
``jobs`` hash behind an audit row, the id of a finished job pushed back into
``pending``, an id with no row, a row edited into something else. The worker runs what a
live row says and nothing else: planted envelopes are ignored (the row's function runs
with the row's arguments), finished jobs never run again and their rows stay as they
are, and the worker survives (a healthy job in the same run succeeds).
"""

from __future__ import annotations

import logging
import threading

import pytest

from django_delayq import schedule, signals
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine.envelope import Envelope
from django_delayq.exceptions import InvalidJob
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from tests import jobs_chaos
from tests.helpers import burst, point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cfg(settings, redis_server, exec_table):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    return settings


def plant(envelope: bytes | str, **schedule_kwargs):  # type: ignore[no-untyped-def]
    """A valid job whose envelope in Redis is then replaced, and made due now."""
    h = schedule("tests.jobs_chaos.record", "planted", delay=3600, **schedule_kwargs)
    engine = get_engine()
    engine.client.hset(engine.keys("default").jobs, h.id, envelope)
    engine.reschedule("default", h.id, delay_ms=0)
    return h


def run_with_a_healthy_job() -> None:
    healthy = schedule("tests.jobs_chaos.record", "healthy")
    assert burst() == 0
    assert healthy.status == JobStatus.SUCCEEDED  # the worker kept going


def burst_worker() -> Worker:
    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("default",), concurrency=2, burst=True))
    assert worker.run() == 0
    return worker


PLANTED = [
    "\u00e9 not json {[",
    '{"path": "x"}',
    '["tests.jobs_chaos.record", "notalist"]',
    '["tests.jobs_chaos.record", [], {}, "3"]',
    "[]",
    "null",
    "[" * 5000 + "]" * 5000,
    Envelope(path="tests.jobs_chaos.record", args=["evil"]).encode(),
    Envelope(path="tests.jobs.add", args=[40, 2]).encode(),
    Envelope(path="builtins.id", args=[42]).encode(),
    Envelope(path="tests.jobs_chaos.renamed_in_a_later_deploy", max_attempts=1).encode(),
]


@pytest.mark.parametrize("envelope", PLANTED, ids=range(len(PLANTED)))
def test_planted_envelope_is_ignored_and_the_row_runs(cfg, envelope) -> None:  # type: ignore[no-untyped-def]
    h = plant(envelope)
    run_with_a_healthy_job()
    row = h.job
    assert (row.status, row.result, row.attempts) == (JobStatus.SUCCEEDED, "planted", 1)
    assert [e[4] for e in jobs_chaos.executions(h.id)] == ["planted"]
    assert get_engine().inspect("default", h.id).place == ""


def test_envelope_that_is_not_utf8_sets_the_job_aside_unrun(cfg) -> None:  # type: ignore[no-untyped-def]
    # Bytes no client can decode: claim moves the job to dead before handing it out (a
    # Redis writer can drop a job, never choose what runs); the row is not touched here,
    # the reconciler settles it (tests/reliability/test_outbox.py).
    h = plant(b"\xff\xfe not json {[")
    run_with_a_healthy_job()
    assert get_engine().inspect("default", h.id).place == "dead"
    assert jobs_chaos.executions(h.id) == []
    assert h.job.status == JobStatus.SCHEDULED


def test_os_system_envelope_never_runs(cfg, tmp_path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "pwned"
    h = plant(Envelope(path="os.system", args=["touch %s" % marker]).encode())
    run_with_a_healthy_job()
    assert (h.job.status, h.job.result) == (JobStatus.SUCCEEDED, "planted")
    assert not marker.exists()


def test_callable_outside_allow_list_in_the_row_never_runs(cfg, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Whoever can edit rows is trusted more than whoever can write to Redis, but even a
    row naming ``os.system`` is refused by the allow-list."""
    marker = tmp_path / "pwned"
    h = schedule("tests.jobs_chaos.record", "x")
    Job.objects.filter(pk=h.id).update(callable_path="os.system", args=["touch %s" % marker])
    run_with_a_healthy_job()
    row = h.job
    assert row.status == JobStatus.DEAD and "ALLOWED_CALLABLES" in row.last_error
    assert row.error_type == "django_delayq.core.registry.NotAllowed"
    assert not marker.exists()


@pytest.mark.parametrize("final", [JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.DEAD])
def test_finished_job_pushed_back_into_pending_never_runs_again(cfg, caplog, final) -> None:  # type: ignore[no-untyped-def]
    """The id of a finished job added to ``pending`` (or a stale copy redelivered) is set
    aside: not run, taken out of Redis, counted and logged; its row keeps its status,
    result and attempts."""
    h = schedule("tests.jobs_chaos.record", "once")
    burst_worker()
    Job.objects.filter(pk=h.id).update(status=final)
    before = Job.objects.filter(pk=h.id).values().get()
    succeeded: list[str] = []

    def on_succeeded(sender, job_id, **kwargs):  # type: ignore[no-untyped-def]
        succeeded.append(job_id)

    engine = get_engine()
    signals.job_succeeded.connect(on_succeeded, weak=False)
    try:
        for _ in range(3):
            engine.client.zadd(engine.keys("default").pending, {h.id: 0})
            worker = burst_worker()
            assert worker.claiming.handover.set_aside == 1
    finally:
        signals.job_succeeded.disconnect(on_succeeded)
    assert succeeded == [] and len(jobs_chaos.executions(h.id)) == 1
    assert Job.objects.filter(pk=h.id).values().get() == before
    assert engine.inspect("default", h.id).place == ""
    notes = [r for r in caplog.records if h.id in r.getMessage() and "set aside" in r.getMessage()]
    assert len(notes) == 3 and notes[0].levelno == logging.WARNING
    assert final in notes[0].getMessage()


def test_id_without_a_row_is_set_aside_to_dead(cfg, caplog) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    engine.client.zadd(engine.keys("default").pending, {"01NOROWFORTHISID0000000000": 0})
    engine.client.hset(engine.keys("default").jobs, "01NOROWFORTHISID0000000000",
                       Envelope(path="tests.jobs_chaos.record", args=["evil"]).encode())
    worker = burst_worker()
    assert worker.claiming.handover.set_aside == 1 and jobs_chaos.executions() == []
    assert engine.inspect("default", "01NOROWFORTHISID0000000000").place == "dead"
    assert not Job.objects.exists()
    assert "no audit row" in caplog.text


def test_function_that_no_longer_exists_retries_then_dies(cfg) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs_chaos.record", "x", max_attempts=2, backoff=[3600])
    Job.objects.filter(pk=h.id).update(callable_path="tests.jobs_chaos.renamed_in_a_later_deploy")
    run_with_a_healthy_job()
    assert h.job.status == JobStatus.RETRYING  # another worker may run the newer code
    assert h.job.error_type == "builtins.AttributeError"
    get_engine().reschedule("default", h.id, delay_ms=0)
    burst()
    row = h.job
    assert (row.status, row.attempts, row.error_type) == (JobStatus.DEAD, 2,
                                                          "builtins.AttributeError")
    assert "renamed_in_a_later_deploy" in row.last_error


@pytest.mark.parametrize(("column", "value", "reason"), [
    ("args", {"not": "a list"}, "wrong types"),
    ("kwargs", ["not", "a dict"], "wrong types"),
    ("backoff", "x", "backoff 'x'"),
    ("backoff", [], "must not be empty"),
    ("backoff", [1e308], "a year"),
    ("backoff", {"factor": 1e308}, "factor"),
    ("max_attempts", 5000, "from 1 to 1000"),
])
def test_row_edited_into_nonsense_ends_dead_alone(cfg, column, value, reason) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs_chaos.always_raises", "x", max_attempts=3)
    Job.objects.filter(pk=h.id).update(**{column: value})
    run_with_a_healthy_job()
    row = h.job
    assert row.status == JobStatus.DEAD and row.last_error.startswith("invalid row: ")
    assert reason in row.last_error and jobs_chaos.executions(h.id) == []
    assert row.error_type == "django_delayq.exceptions.InvalidRow"
    [attempt] = JobAttempt.objects.filter(job_id=h.id)
    assert attempt.outcome == JobStatus.DEAD and reason in attempt.error
    assert attempt.error_type == row.error_type
    assert get_engine().inspect("default", h.id).place == "dead"


def test_function_that_always_raises_ends_dead_with_history(cfg) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs_chaos.always_raises", "nope", max_attempts=3, backoff=[0, 0])
    run_with_a_healthy_job()  # backoff 0: the three attempts run in one burst
    row = h.job
    assert row.status == JobStatus.DEAD and row.attempts == 3
    assert (row.error_type, row.last_error) == ("builtins.ValueError", "nope")
    assert "Traceback" in row.traceback and "ValueError: nope" in row.traceback
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list("number", "outcome")) == [
        (1, "retrying"), (2, "retrying"), (3, "dead")]
    assert len(jobs_chaos.executions(h.id)) == 3


def test_huge_arguments_rejected_at_schedule_big_but_allowed_runs(cfg) -> None:  # type: ignore[no-untyped-def]
    cfg.DELAYQ = {**cfg.DELAYQ, "MAX_PAYLOAD_BYTES": 200_000}
    with pytest.raises(InvalidJob, match="MAX_PAYLOAD_BYTES"):
        schedule("tests.jobs_chaos.size_of", "x" * 200_001)
    with pytest.raises(InvalidJob, match="MAX_PAYLOAD_BYTES"):
        schedule("tests.jobs_chaos.size_of", *(["y" * 100] * 3000))  # many arguments
    big = schedule("tests.jobs_chaos.size_of", "x" * 150_000, *(["y" * 10] * 2000))
    run_with_a_healthy_job()
    assert (big.job.status, big.job.result) == (JobStatus.SUCCEEDED, 170_000)


def test_hung_job_does_not_stop_the_worker_and_keeps_its_lease(cfg) -> None:  # type: ignore[no-untyped-def]
    """A job that hangs past its lease: the worker heartbeats it (no redelivery while
    the worker lives) and its other threads keep running jobs."""
    cfg.DELAYQ = {**cfg.DELAYQ, "LEASE_SECONDS": 0.6, "RECOVER_INTERVAL_SECONDS": 0.1}
    jobs_chaos.reset_hung()
    hung = schedule("tests.jobs_chaos.hang", 30)
    worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",),
                                                                concurrency=2))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: hung.status == JobStatus.RUNNING)
        others = [schedule("tests.jobs_chaos.record", "o%d" % i) for i in range(5)]
        wait_until(lambda: all(o.status == JobStatus.SUCCEEDED for o in others))
        threading.Event().wait(1.5)  # 2.5 leases
        assert get_engine().inspect("default", hung.id).place == "inflight"
        assert hung.job.attempts == 1 and len(jobs_chaos.executions(hung.id)) == 1
    finally:
        jobs_chaos.release_hung()
        worker.request_stop()
        thread.join(10)
    assert hung.status == JobStatus.SUCCEEDED


def test_job_hanging_past_its_time_limit_is_retried_with_reason(cfg) -> None:  # type: ignore[no-untyped-def]
    cfg.DELAYQ = {**cfg.DELAYQ, "LEASE_SECONDS": 0.6, "JOB_TIMEOUT_SECONDS": 1}
    jobs_chaos.reset_hung()
    hung = schedule("tests.jobs_chaos.hang", 30, max_attempts=2)
    worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",),
                                                                concurrency=2))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: hung.job.attempts >= 2 or hung.status == JobStatus.RETRYING,
                   timeout=8)
        assert "timed out" in hung.job.last_error
        assert hung.job.error_type == "django_delayq.exceptions.JobTimeout"
    finally:
        jobs_chaos.release_hung()
        worker.request_stop()
        thread.join(10)


def test_id_copied_into_another_queues_keys_runs_only_in_its_own_queue(cfg) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs_chaos.record", "emails-only", delay=3600, queue="emails")
    engine = get_engine()
    engine.client.zadd(engine.keys("default").pending, {h.id: 0})  # a Redis writer's copy
    run_with_a_healthy_job()  # a worker of "default" claims the copy
    assert jobs_chaos.executions(h.id) == []
    assert h.job.status == JobStatus.SCHEDULED
    assert engine.inspect("default", h.id).place == ""  # the copy is gone
    assert engine.inspect("emails", h.id).place == "pending"  # the job waits in its queue



def test_waiting_job_pushed_into_pending_is_set_aside_and_runs_after_its_parent(
        cfg, caplog) -> None:  # type: ignore[no-untyped-def]
    """A workflow child's id planted in ``pending`` before its parent finished does not
    run then; the log says it waits (not that it never runs); it runs once, after."""
    parent = schedule("tests.jobs_chaos.record", "parent", delay=3600)
    child = schedule("tests.jobs_chaos.record", "child", after=[parent])
    engine = get_engine()
    engine.client.zadd(engine.keys("default").pending, {child.id: 0})
    assert burst_worker().claiming.handover.set_aside == 1
    note = next(r.getMessage() for r in caplog.records
                if child.id in r.getMessage() and "set aside" in r.getMessage())
    assert "waiting for its parents" in note and "does not run again" not in note, note
    assert child.status == JobStatus.WAITING and jobs_chaos.executions(child.id) == []
    engine.reschedule("default", parent.id, delay_ms=0)
    wait_until(lambda: burst() == 0 and child.status == JobStatus.SUCCEEDED, timeout=30)
    assert len(jobs_chaos.executions(child.id)) == 1
