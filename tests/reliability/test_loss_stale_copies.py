"""A worker that holds jobs when Redis restarts empty goes on: the copies it held are
stale (their leases went with the data), the reconciler puts the jobs back, and the
redelivered copies run.

A stale copy no thread has taken is dropped, never run; one that runs keeps its thread
until it ends (its settlement is refused) and then frees it. The worker keeps claiming,
and a SIGTERM drains it. The wedge this guards against: the ledger held jobs by id, so
a redelivered copy claimed while the stale one was held took its place; the thread of
the stale copy then started the redelivered one's record, which no thread ever ended.
The worker counted it running for good (no room to claim, its lease extended for ever,
a drain that never ended)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from django_delayq import schedule_many
from django_delayq.core.options import JobSpec
from django_delayq.models import Job, JobStatus
from tests.helpers import point_at, wait_until

if TYPE_CHECKING:
    from tests.redis_server import RedisServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

BUSY_S = 6.0  # outlasts the heartbeat that finds the leases gone (a third of a lease)


def _succeeded(ids: list[str]) -> bool:
    return Job.objects.filter(id__in=ids, status=JobStatus.SUCCEEDED).count() == len(ids)


def _record(out: Path, tags: list[str]) -> list[str]:
    return schedule_many("tests.jobs.record", [JobSpec(args=(str(out), t)) for t in tags])


@pytest.mark.parametrize(("args", "threads"), [
    (("--concurrency", "1"), 1),
    (("--concurrency", "2"), 2),
    (("--processes", "1", "--concurrency", "2"), 2),
], ids=["c1", "c2", "processes"])
def test_a_worker_holding_jobs_when_redis_restarts_empty_runs_them_again_and_drains(  # type: ignore[no-untyped-def]
        settings, volatile_server: RedisServer,
        start_worker: Callable[..., subprocess.Popen[str]], tmp_path: Path,
        args: tuple[str, ...], threads: int) -> None:
    point_at(settings, volatile_server, LEASE_SECONDS=4.5)
    out = tmp_path / "runs.txt"
    proc = start_worker("--queues", "default", *args)
    try:
        # instant jobs first: the worker's pace makes it prefetch what follows
        warm = _record(out, ["warm%d" % i for i in range(5)])
        wait_until(lambda: _succeeded(warm), timeout=60)
        busy = schedule_many("tests.jobs.sleep_then_record",
                             [JobSpec(args=(str(out), "busy%d" % i, BUSY_S)) for i in range(2)])
        quick = _record(out, ["quick%d" % i for i in range(10)])
        wait_until(lambda: Job.objects.filter(id__in=busy, status=JobStatus.RUNNING).count()
                   == threads, timeout=30)
        running = set(Job.objects.filter(id__in=busy, status=JobStatus.RUNNING)
                      .values_list("id", flat=True))
        volatile_server.restart()  # every key gone, the worker's held leases with them
        wait_until(lambda: _succeeded(busy + quick), timeout=90)
        probe = _record(out, ["probe"])  # the worker still claims
        wait_until(lambda: _succeeded(probe), timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0  # drained: nothing held for good
    runs: dict[str, list[tuple[str, str]]] = {}
    for tag, job_id, attempt, _pid in (line.split() for line in out.read_text().splitlines()):
        runs.setdefault(tag, []).append((job_id, attempt))
    again = {tag for tag, r in runs.items() if len(r) > 1}
    # only a run under way at the loss runs again (documented), each run its own attempt
    assert again <= {"busy%d" % i for i, job_id in enumerate(busy) if job_id in running}, runs
    assert all(len({a for _, a in runs[tag]}) == len(runs[tag]) for tag in again), runs
    assert len(runs) == 5 + 2 + 10 + 1
