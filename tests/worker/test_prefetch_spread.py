"""Slow jobs after a run of quick ones spread over the workers of their queue: a worker
whose pace was measured on no-op jobs may claim the whole batch of slow jobs, but hands
back what its threads do not start soon, so they do not wait in its hands while the other
worker's threads sit idle.

A real ``delayq_worker --processes 2 --concurrency 4`` (two full workers, each with its
own pace and prefetch); each slow job records its process in a file, its row its start
and end."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
from django.db import transaction

from django_delayq import JobSpec, schedule, schedule_many
from django_delayq.models import Job, JobStatus
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

PROCESSES, THREADS = 2, 4
SLOW, SECONDS = 24, 0.5  # on one worker: 3 rounds of its 4 threads; on both: 1.5 rounds


def _pids(path: Path) -> list[int]:
    return [int(line.split()[-1]) for line in path.read_text().splitlines()] \
        if path.exists() else []


def _both_ran(path: Path) -> bool:
    """Every worker process has run a job; if not, one more for each thread."""
    if len(set(_pids(path))) == PROCESSES:
        return True
    for _ in range(THREADS * PROCESSES):
        schedule("tests.jobs.sleep_then_record", str(path), "warm", 0.05)
    return False


@pytest.mark.parametrize("pause", [True, False], ids=["after-a-pause", "right-behind"])
def test_slow_jobs_after_quick_ones_spread_over_the_workers(start_worker, tmp_path,  # type: ignore[no-untyped-def]
                                                            pause: bool) -> None:
    """The slow jobs come once the quick ones are done (the workers' pace is of jobs long
    gone), or right behind them (claimed in the quick jobs' batches)."""
    warm_runs, runs = tmp_path / "warm.txt", tmp_path / "runs.txt"
    proc = start_worker("--processes", str(PROCESSES), "--concurrency", str(THREADS))
    try:
        # both worker processes up (each ran a job), then both learn the pace of no-op jobs
        wait_until(lambda: _both_ran(warm_runs), timeout=90, step=0.2)
        with transaction.atomic():
            for i in range(400):
                schedule("tests.jobs.noop", i)
        if pause:
            wait_until(lambda: not Job.objects.exclude(status=JobStatus.SUCCEEDED).exists(),
                       timeout=120)
        slow = schedule_many("tests.jobs.sleep_then_record",
                             [JobSpec(args=(str(runs), "slow", SECONDS)) for _ in range(SLOW)])
        wait_until(lambda: Job.objects.filter(id__in=slow, status=JobStatus.SUCCEEDED).count()
                   == SLOW, timeout=120)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == EXIT_OK
    by_process = Counter(_pids(runs))
    assert sum(by_process.values()) == SLOW
    # before: 24 (or 20) runs in one process, the other worker's threads idle
    # (how long the drain took is a benchmark's figure: docs/performance.md)
    assert len(by_process) == PROCESSES and min(by_process.values()) >= SLOW // 4, by_process
