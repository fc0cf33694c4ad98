"""A job a real worker holds for a free thread (prefetched behind a running job) and
cancelled meanwhile never starts: cancel() finds it in flight (``ALREADY_RUNNING``), and
the worker reads the cancel from its row before a thread takes it. Thread mode and
``--processes`` (each process a full worker, with its own prefetch).

``--prefetch 1`` makes the worker hold a job beyond its free thread (by pace it holds
none behind a slow job: it hands such jobs back, for another worker's idle thread); a job
that waits for a file holds the only thread while the next job is claimed behind it, and
cancelled."""

from __future__ import annotations

import signal

import pytest
from django.db import transaction

from django_delayq import cancel, schedule
from django_delayq.core.connection import get_engine
from django_delayq.engine import CancelOutcome
from django_delayq.models import Job, JobStatus
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def _held_then_cancelled(start_worker, tmp_path, *mode: str) -> None:  # type: ignore[no-untyped-def]
    marker, gate = tmp_path / "mark.txt", tmp_path / "gate"
    with transaction.atomic():  # the worker is up once these ran
        for i in range(10):
            schedule("tests.jobs.noop", i)
    proc = start_worker(*mode, "--concurrency", "1", "--prefetch", "1")
    try:
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 10,
                   timeout=120)
        slow = schedule("tests.jobs.report_then_wait", "slow", str(gate))
        wait_until(lambda: slow.status == JobStatus.RUNNING, timeout=60)
        mark = schedule("tests.jobs.record", str(marker), "mark")
        wait_until(lambda: get_engine().inspect("default", mark.id).place == "inflight",
                   timeout=60)  # claimed behind the running job: held, not started
        assert mark.status == JobStatus.SCHEDULED
        assert cancel(mark.id) is CancelOutcome.ALREADY_RUNNING
        # ended while the only thread still runs the other job: it never reaches a thread
        wait_until(lambda: mark.status == JobStatus.CANCELLED, timeout=30)
        assert slow.status == JobStatus.RUNNING
        gate.touch()
        wait_until(lambda: slow.status == JobStatus.SUCCEEDED, timeout=60)
        assert not marker.exists()  # its function was never called
        row = Job.objects.get(pk=mark.id)
        assert row.status == JobStatus.CANCELLED
        assert row.last_error == "cancelled before it started; it did not run"
        assert get_engine().inspect("default", mark.id).place == ""  # forgotten by Redis
    finally:  # failed or not: the waiting job ends, the worker (its processes) drains
        gate.touch()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == EXIT_OK

def test_prefetched_job_cancelled_never_starts(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _held_then_cancelled(start_worker, tmp_path)


def test_prefetched_job_cancelled_never_starts_under_processes(  # type: ignore[no-untyped-def]
        start_worker, tmp_path) -> None:
    _held_then_cancelled(start_worker, tmp_path, "--processes", "1")
