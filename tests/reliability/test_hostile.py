"""Issue 3 item 3: hostile and broken payloads never stop a worker.

Each case runs a real (in-process) worker over a payload planted the way an attacker
or a bad deploy would: in Redis behind an audit row. The worker survives (a healthy
job in the same run succeeds) and the row ends retrying or dead with the reason.
"""

from __future__ import annotations

import threading

import pytest

from django_delayq import schedule
from django_delayq.conf import get_settings
from django_delayq.connection import get_engine
from django_delayq.engine.envelope import Envelope
from django_delayq.exceptions import InvalidJob
from django_delayq.models import JobAttempt, JobStatus
from django_delayq.worker import Worker, WorkerOptions
from tests import jobs_chaos
from tests.reliability.conftest import burst, point_at, wait_until

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


def test_envelope_that_is_not_utf8_goes_dead_with_reason(cfg) -> None:  # type: ignore[no-untyped-def]
    h = plant(b"\xff\xfe not json {[")
    run_with_a_healthy_job()
    assert (h.job.status, "invalid envelope" in h.job.last_error) == (JobStatus.DEAD, True)


def test_envelope_that_is_not_json_goes_dead_with_reason(cfg) -> None:  # type: ignore[no-untyped-def]
    h = plant("\u00e9 not json {[")
    run_with_a_healthy_job()
    row = h.job
    assert row.status == JobStatus.DEAD and "invalid envelope" in row.last_error
    assert get_engine().inspect("default", h.id).place == "dead"
    assert jobs_chaos.executions(h.id) == []


@pytest.mark.parametrize("envelope", ['{"path": "x"}', '["tests.jobs_chaos.record", "notalist"]',
                                      '["tests.jobs_chaos.record", [], {}, "3"]', "[]", "null"])
def test_json_that_is_not_an_envelope_goes_dead(cfg, envelope) -> None:  # type: ignore[no-untyped-def]
    h = plant(envelope)
    run_with_a_healthy_job()
    assert (h.job.status, "invalid envelope" in h.job.last_error) == (JobStatus.DEAD, True)


def test_callable_outside_allow_list_never_runs(cfg, tmp_path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "pwned"
    h = plant(Envelope(path="os.system", args=["touch %s" % marker]).encode())
    run_with_a_healthy_job()
    row = h.job
    assert row.status == JobStatus.DEAD and "not allowed" in row.last_error
    assert "ALLOWED_CALLABLES" in row.last_error
    assert not marker.exists()


def test_function_that_no_longer_exists_retries_then_dies(cfg) -> None:  # type: ignore[no-untyped-def]
    h = plant(Envelope(path="tests.jobs_chaos.renamed_in_a_later_deploy", max_attempts=2,
                       backoff=[3600]).encode())
    run_with_a_healthy_job()
    assert h.job.status == JobStatus.RETRYING  # another worker may run the newer code
    assert "AttributeError" in h.job.last_error
    get_engine().reschedule("default", h.id, delay_ms=0)
    burst()
    row = h.job
    assert row.status == JobStatus.DEAD and "no attempts left" in row.last_error
    assert "renamed_in_a_later_deploy" in row.last_error


def test_function_that_always_raises_ends_dead_with_history(cfg) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs_chaos.always_raises", "nope", max_attempts=3, backoff=[0, 0])
    run_with_a_healthy_job()  # backoff 0: the three attempts run in one burst
    row = h.job
    assert row.status == JobStatus.DEAD and row.attempts == 3
    assert "ValueError: nope" in row.last_error and "Traceback" in row.traceback
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
        assert "time" in hung.job.last_error.lower()
    finally:
        jobs_chaos.release_hung()
        worker.request_stop()
        thread.join(10)
