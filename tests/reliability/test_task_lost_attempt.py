"""A Django task whose worker is SIGKILLed while it runs: the lost attempt keeps when and
on which worker it started (its ``JobAttempt`` row takes them from the job row the
killed worker's start wrote), and the next attempt's context sees its ``LeaseLost``.

Real ``delayq_worker`` subprocesses, the test database, a private redis-server, short
leases."""

from __future__ import annotations

import os
from datetime import datetime

import pytest

from django_delayq.models import Job, JobAttempt, JobStatus
from tests.helpers import wait_until
from tests.reliability.conftest import kill, stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

BACKEND = "django_delayq.backends.DelayQBackend"
FAST = {"LEASE_SECONDS": 1.5, "RECOVER_INTERVAL_SECONDS": 0.2,
        "ALLOWED_CALLABLES": ["tests.jobs", "tests.jobs_chaos", "tests.jobs_tasks"]}
LEASE_LOST = "django_delayq.exceptions.LeaseLost"


def test_a_killed_attempt_keeps_its_start_and_worker_and_its_error_is_seen_next(
        cfg, start_with, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg.DELAYQ = {**cfg.DELAYQ, "ALLOWED_CALLABLES": FAST["ALLOWED_CALLABLES"]}
    cfg.TASKS = {"default": {"BACKEND": BACKEND,
                             "OPTIONS": {"MAX_ATTEMPTS": 3, "BACKOFF": [0]}}}
    from tests import jobs_tasks  # needs TASKS set: the decorators validate on import

    result = jobs_tasks.lost_first.enqueue(str(tmp_path), 120)
    victim = start_with(FAST, "--worker-id", "victim", "--concurrency", "1")
    wait_until(lambda: os.path.exists(tmp_path / "started"), timeout=60)
    # the killed worker's start is on the row (its audit flush) before the kill
    wait_until(lambda: Job.objects.filter(pk=result.id, status=JobStatus.RUNNING,
                                          worker_id__startswith="victim:").exists(), timeout=30)
    first_start = Job.objects.get(pk=result.id).started_at
    kill(victim)

    rescuer = start_with(FAST, "--worker-id", "rescuer", "--concurrency", "1")
    wait_until(lambda: Job.objects.filter(pk=result.id, status=JobStatus.SUCCEEDED).exists(),
               timeout=90, step=0.2)
    stop(rescuer)

    lost = JobAttempt.objects.get(job_id=result.id, number=1)
    assert (lost.error_type, lost.started_at) == (LEASE_LOST, first_start)
    assert lost.worker_id.startswith("victim:")
    row = Job.objects.get(pk=result.id)
    assert row.attempts == 2 and row.started_at > first_start

    seen = row.result  # what attempt 2's TaskContext said at its start
    assert seen["attempt"] == 2
    assert seen["errors"] == [LEASE_LOST]
    assert [w.split(":")[0] for w in seen["worker_ids"]] == ["victim", "rescuer"]
    assert datetime.fromisoformat(seen["started_at"]) == first_start
    assert datetime.fromisoformat(seen["last_attempted_at"]) > first_start

    result.refresh()  # get_result(): the rows as stored
    assert [w.split(":")[0] for w in result.worker_ids] == ["victim", "rescuer"]
    assert result.worker_ids[0] == lost.worker_id
    assert (result.started_at, result.last_attempted_at) == (first_start, row.started_at)
    assert [e.exception_class_path for e in result.errors] == [LEASE_LOST]
