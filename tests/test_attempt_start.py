"""One start instant per attempt (docs/signals.md): ``job_started``'s ``started_at``, the
job row's ``started_at``, the attempt's ``JobAttempt`` row, ``job_retrying`` /
``job_dead`` and the Tasks ``TaskContext`` / ``TaskResult`` all carry the same value, so
a receiver can match them by it. Through a real burst worker (its threads, the ledger's
start) and through ``run_due_jobs`` (this thread)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from django_delayq import compat, schedule, signals
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.testing import run_due_jobs, run_worker

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(compat.tasks is None, reason="no Django Tasks framework")]

NAMES = ("job_started", "job_retrying", "job_dead")


@pytest.fixture
def sent(delayq_settings) -> Iterator[dict[str, list[dict[str, Any]]]]:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "ALLOWED_CALLABLES": ["tests.jobs", "tests.jobs_tasks"]}
    delayq_settings.TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQBackend",
                                         "OPTIONS": {"MAX_ATTEMPTS": 2, "BACKOFF": [0]}}}
    log: dict[str, list[dict[str, Any]]] = {name: [] for name in NAMES}
    receivers = {}
    for name in NAMES:
        def receiver(name: str = name, **kwargs: Any) -> None:
            log[name].append(kwargs)
        receivers[name] = receiver
        getattr(signals, name).connect(receiver, weak=False)
    yield log
    for name, receiver in receivers.items():
        getattr(signals, name).disconnect(receiver)


def _run_all(how: str) -> None:
    for _ in range(20):  # each round runs what is due; the retry is due at once
        if (run_worker() if how == "worker" else run_due_jobs()) == 0:
            return


@pytest.mark.parametrize("how", ["worker", "run_due_jobs"])
def test_each_attempt_has_one_start_instant(sent, how):
    from tests import jobs_tasks

    result = jobs_tasks.starts.enqueue()
    _run_all(how)
    row = Job.objects.get(pk=result.id)
    assert row.status == JobStatus.SUCCEEDED, row.last_error
    first, second = [kw["started_at"] for kw in sent["job_started"]]
    (retry,) = sent["job_retrying"]
    (attempt_row,) = JobAttempt.objects.filter(job_id=result.id)
    assert retry["started_at"] == attempt_row.started_at == first
    assert row.started_at == second
    # attempt 1's context: its own start, first and latest
    assert retry["error"] == "%s %s" % (first.isoformat(), first.isoformat())
    assert row.result == {"started_at": first.isoformat(),
                          "last_attempted_at": second.isoformat()}
    result.refresh()
    assert (result.started_at, result.last_attempted_at) == (first, second)


@pytest.mark.parametrize("how", ["worker", "run_due_jobs"])
def test_a_dead_attempt_keeps_its_start_instant(sent, how):
    handle = schedule("tests.jobs.boom", "kaput", max_attempts=1)
    _run_all(how)
    (started,) = sent["job_started"]
    (dead,) = sent["job_dead"]
    attempt_row = JobAttempt.objects.get(job_id=handle.id)
    row = Job.objects.get(pk=handle.id)
    assert isinstance(started["started_at"], datetime)
    assert dead["started_at"] == attempt_row.started_at == row.started_at \
        == started["started_at"]


def test_an_eager_run_gives_its_context_the_start_of_its_row(sent, delayq_settings):
    from tests import jobs_tasks

    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "EAGER": True}
    result = jobs_tasks.starts.enqueue()  # attempt 1 fails: its context's start, the error
    row = Job.objects.get(pk=result.id)
    (started,) = sent["job_started"]
    (dead,) = sent["job_dead"]
    assert row.started_at == started["started_at"] == dead["started_at"]
    assert row.last_error == "%s %s" % (row.started_at.isoformat(), row.started_at.isoformat())


def test_an_attempt_timed_out_by_the_worker_keeps_its_start_instant(sent, tmp_path):
    handle = schedule("tests.jobs.sleep_then_record", str(tmp_path / "out"), "t", 1.5,
                      max_attempts=1, timeout=0.3)
    _run_all("worker")
    (started,) = sent["job_started"]
    (dead,) = sent["job_dead"]
    attempt_row = JobAttempt.objects.get(job_id=handle.id)
    assert attempt_row.error_type == "django_delayq.exceptions.JobTimeout"
    assert dead["started_at"] == attempt_row.started_at == Job.objects.get(
        pk=handle.id).started_at == started["started_at"]
