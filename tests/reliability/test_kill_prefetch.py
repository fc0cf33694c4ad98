"""A SIGKILLed worker's claimed jobs that were waiting for a thread never ran: they are
due again without being charged an attempt (a start mark in Redis tells a run that
started from one that did not), so a job with ``max_attempts=1`` among them still runs,
and every job's attempts equal its runs.

A real ``delayq_worker`` subprocess with one thread, the test database, a private
redis-server, short leases."""

from __future__ import annotations

import os

import pytest

from django_delayq import JobSpec, schedule, schedule_many
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt, JobStatus
from tests import jobs_chaos
from tests.helpers import wait_until
from tests.reliability.conftest import kill, stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

FAST = {"LEASE_SECONDS": 1.5, "RECOVER_INTERVAL_SECONDS": 0.2,
        "RECONCILE_INTERVAL_SECONDS": 0.5, "RECONCILE_GRACE_SECONDS": 1}


def test_jobs_waiting_for_a_thread_when_the_worker_is_killed_are_not_charged(
        start_with, tmp_path) -> None:  # type: ignore[no-untyped-def]
    runs = str(tmp_path)
    warm = schedule_many("tests.jobs_chaos.mark_run",
                         [JobSpec(args=(runs, 0.005)) for _ in range(40)])
    # it holds jobs beyond its one thread (by pace it would hand them back once the slow
    # job shows its threads busy: for another worker's idle thread)
    proc = start_with(FAST, "--concurrency", "1", "--prefetch", "20")
    wait_until(lambda: len(jobs_chaos.marked_runs(runs)) == len(warm), timeout=60)
    slow = schedule("tests.jobs_chaos.slow_first", runs, 120, max_attempts=2, priority=5).id
    waiting = schedule_many("tests.jobs_chaos.mark_run",
                            [JobSpec(args=(runs,)) for _ in range(20)], max_attempts=1)
    engine = get_engine()
    wait_until(lambda: os.path.exists(os.path.join(runs, "started")), timeout=60)
    # the claim after the slow job's start may come a loop later on a busy machine
    wait_until(lambda: engine.stats("default").inflight >= 3, timeout=30, step=0.05)
    kill(proc)  # the slow job ran; the others held by the worker never started

    proc = start_with(FAST, "--concurrency", "4")
    ids = [slow, *waiting]
    try:
        wait_until(lambda: Job.objects.filter(id__in=ids, status=JobStatus.SUCCEEDED).count()
                   == len(ids), timeout=90, step=0.2)
    except AssertionError:
        left = [(j.id == slow, j.status, j.attempts, j.last_error[:80])
                for j in Job.objects.filter(id__in=ids).exclude(status=JobStatus.SUCCEEDED)]
        raise AssertionError("not succeeded: %s" % left[:5]) from None
    stop(proc)
    ran = jobs_chaos.marked_runs(runs)
    rows = {j.id: j for j in Job.objects.filter(id__in=ids)}
    assert rows[slow].attempts == 2 and ran[slow] == [2]  # the killed run was charged
    assert JobAttempt.objects.filter(job_id=slow, number=1).exists()
    for job_id in waiting:
        assert ran[job_id] == [1], (job_id, ran[job_id])
        assert rows[job_id].attempts == 1, (job_id, rows[job_id].attempts)
    assert not JobAttempt.objects.filter(job_id__in=waiting).exists()
