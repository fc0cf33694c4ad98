"""``report_progress()`` in an atomic job: its last value is written in the attempt's
transaction (seen at the commit, gone with a rollback), on real workers (threads and a
``--processes`` child), on SQLite (``IMMEDIATE``: the attempt holds the write lock from its
start) and PostgreSQL; a plain job's progress outlives its failure, as before."""

from __future__ import annotations

import signal
import time

import pytest
from django.db import transaction

from django_delayq import schedule
from django_delayq.core.progress import Reporter
from django_delayq.models import Job, JobStatus
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import wait_until
from tests.worker.conftest import LOGS, wait_or_dump

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

REPORT = "tests.jobs.report_twice"  # reports its first value, then its second from a thread
# Well under the tests' SQLite busy timeout (30 s): a write that waited for the attempt's
# own write lock took that long per job.
PROMPT_S = 25.0


def schedule_four() -> dict[str, str]:
    """An atomic and a plain job, each once succeeding and once failing (one attempt)."""
    return {
        "atomic": schedule(REPORT, {"step": 1}, {"step": 2}, atomic=True).id,
        "atomic_failed": schedule(REPORT, {"step": 1}, {"step": 2}, fail=True, atomic=True,
                                  max_attempts=1).id,
        "plain": schedule(REPORT, {"step": 1}, {"step": 2}).id,
        "plain_failed": schedule(REPORT, {"step": 1}, {"step": 2}, fail=True,
                                 max_attempts=1).id,
    }


def check_rows(ids: dict[str, str]) -> None:
    rows = {name: Job.objects.get(pk=job_id) for name, job_id in ids.items()}
    seen = {name: (row.status, row.attempts, row.progress) for name, row in rows.items()}
    assert seen == {
        "atomic": (JobStatus.SUCCEEDED, 1, {"step": 2}),  # committed with its success
        "atomic_failed": (JobStatus.DEAD, 1, None),  # rolled back with the attempt
        "plain": (JobStatus.SUCCEEDED, 1, {"step": 2}),
        "plain_failed": (JobStatus.DEAD, 1, {"step": 2}),  # a display: kept
    }
    assert rows["atomic_failed"].error_type == "builtins.ValueError"


def log_of(proc) -> str:  # type: ignore[no-untyped-def]
    return LOGS[proc.pid].read_text(errors="replace")


def test_an_atomic_job_writes_its_progress_in_its_transaction(start_worker) -> None:  # type: ignore[no-untyped-def]
    ids = schedule_four()
    t0 = time.monotonic()
    proc = start_worker("--burst", "--concurrency", "4")
    assert wait_or_dump(proc, 120) == EXIT_OK
    elapsed = time.monotonic() - t0
    check_rows(ids)
    assert "could not be written" not in log_of(proc)
    assert elapsed < PROMPT_S, elapsed


def test_an_atomic_job_in_a_processes_child(start_worker) -> None:  # type: ignore[no-untyped-def]
    ids = schedule_four()
    t0 = time.monotonic()
    proc = start_worker("--processes", "1", "--concurrency", "2")
    wait_until(lambda: Job.objects.filter(pk__in=ids.values(), status__in=(
        JobStatus.SUCCEEDED, JobStatus.DEAD)).count() == len(ids), timeout=120)
    elapsed = time.monotonic() - t0
    proc.send_signal(signal.SIGTERM)
    assert wait_or_dump(proc, 60) == EXIT_OK
    check_rows(ids)
    assert "could not be written" not in log_of(proc)
    assert elapsed < PROMPT_S, elapsed


def test_eager_mode_writes_an_atomic_jobs_progress(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """Eager mode runs an atomic job without the transaction: its progress is a plain
    job's (a failure raises, its progress stays)."""
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "EAGER": True}
    h = schedule(REPORT, {"step": 1}, {"step": 2}, atomic=True)
    assert h.result == {"step": 2}
    assert Job.objects.get(pk=h.id).progress == {"step": 2}
    with pytest.raises(ValueError, match="failed after reporting"):
        schedule(REPORT, {"step": 1}, {"step": 3}, fail=True, atomic=True)
    assert Job.objects.filter(progress={"step": 3}).count() == 1


def test_an_attempts_reporter_writes_its_last_value_once_at_the_end() -> None:
    """In an atomic job's attempt (``using``) every report is kept, unthrottled, and the
    last one written by ``finish`` in the open transaction; ``discard`` (the job raised)
    leaves nothing to write."""
    written: list[object] = []
    reporter = Reporter("j", written.append, using="default")
    for i in range(5):
        reporter.report(i)
    assert written == []
    with transaction.atomic():
        reporter.finish()
    assert (written, reporter.writes) == ([4], 1)
    reporter.report(5)
    reporter.discard()
    with transaction.atomic():
        reporter.finish()
    assert (written, reporter.writes) == ([4], 1)
