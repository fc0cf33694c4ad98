"""``JobHandle.result`` and ``JobHandle.wait()``: the succeeded job's return value, or an
error saying why there is none (not finished, dead, cancelled, expired, timed out)."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core import results
from django_delayq.exceptions import (
    InvalidJob,
    JobFailed,
    JobNotFinished,
    JobNotFound,
    WaitTimeout,
)
from django_delayq.models import Job, JobStatus
from django_delayq.testing import run_due_jobs
from tests.helpers import burst, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_result_of_a_succeeded_job_and_before_it_ran(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.add", 2, 3)
    with pytest.raises(JobNotFinished, match="%s has not finished: it is scheduled" % h.id):
        _ = h.result
    assert run_due_jobs() == 1
    assert h.result == 5
    assert h.wait(timeout=5) == 5


def test_a_dead_job_raises_its_last_error(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs_more.raise_value_error", "bad input: 42", max_attempts=1)
    run_due_jobs()
    with pytest.raises(JobFailed) as info:
        h.wait(timeout=5)
    err = info.value
    assert (err.job_id, err.status, err.error_type, err.error) == (
        h.id, "dead", "builtins.ValueError", "bad input: 42")
    assert str(err) == "job %s ended dead: builtins.ValueError: bad input: 42" % h.id
    with pytest.raises(JobFailed, match="ended dead"):
        _ = h.result


def test_cancelled_and_expired_jobs_say_so(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    cancelled = schedule("tests.jobs.noop", delay=3600)
    cancelled.cancel()
    with pytest.raises(JobFailed, match="ended cancelled") as info:
        cancelled.wait(timeout=5)
    assert info.value.status == JobStatus.CANCELLED
    # seconds from schedule()'s own now: always after its due time, however slow the call
    expired = schedule("tests.jobs.noop", delay=0.05, expires=0.2)
    wait_until(lambda: timezone.now() > Job.objects.get(pk=expired.id).expires_at)
    run_due_jobs()
    with pytest.raises(JobFailed, match="ended expired: expired at") as info:
        _ = expired.result
    assert info.value.status == JobStatus.EXPIRED


def test_wait_times_out_naming_the_job_and_the_timeout(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop", delay=3600)
    with pytest.raises(WaitTimeout) as info:
        h.wait(timeout=0.2)
    assert isinstance(info.value, TimeoutError)
    assert str(info.value) == "job %s is still scheduled after waiting 0.2s for it" % h.id
    assert (info.value.job_id, info.value.timeout) == (h.id, 0.2)


def test_wait_returns_what_a_real_worker_ran(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    gate = tmp_path / "gate"
    h = schedule("tests.jobs.report_then_wait", {"step": 1}, str(gate))
    worker = threading.Thread(target=burst, daemon=True)
    worker.start()
    wait_until(lambda: Job.objects.get(pk=h.id).progress == {"step": 1}, timeout=60)
    with pytest.raises(WaitTimeout, match="still running"):
        h.wait(timeout=0.1)  # running, held by its gate
    gate.touch()
    assert h.wait(timeout=120) == {"step": 1}
    worker.join(60)
    assert not worker.is_alive()


def test_wait_inside_an_atomic_block_is_refused(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        h = schedule("tests.jobs.noop", delay=3600)
        with pytest.raises(TransactionManagementError, match="inside an atomic block"):
            h.wait(timeout=1)


def test_wait_checks_its_arguments_and_the_id(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop", delay=3600)
    with pytest.raises(InvalidJob, match=r"timeout=-1\)"):
        h.wait(timeout=-1)
    with pytest.raises(InvalidJob, match=r"poll=0\)"):
        h.wait(poll=0)
    with pytest.raises(JobNotFound, match="nope"):
        results.wait("nope", timeout=1)


def test_eager_mode_result_wait_and_progress(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "EAGER": True}
    h = schedule("tests.jobs.report_steps", 25)
    assert (h.result, h.wait(timeout=1)) == (25, 25)
    assert Job.objects.get(pk=h.id).progress == {"done": 25, "total": 25}
