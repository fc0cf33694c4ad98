"""A job made final by lease recovery (its worker died) is reported as docs/signals.md,
"Recovered jobs", says: its ``job_dead`` / ``job_cancelled`` with ``worker_id=""``, the
``LeaseLost`` error and the lost attempt's start; a dead one logged at ERROR on the
logger docs/guide.md names for dead jobs (``django_delayq.worker.settle``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_delayq import cancel, schedule, signals
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.helpers import signals_sent

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_LOST = "django_delayq.exceptions.LeaseLost"


@pytest.fixture
def sent(delayq_settings) -> Iterator[list[tuple[str, dict[str, Any]]]]:  # type: ignore[no-untyped-def]
    with signals_sent("job_dead", "job_cancelled") as log:
        yield log


def _lost(max_attempts: int) -> tuple[str, Any]:
    """A job claimed and started by a "worker" that died: its 50 ms lease lapses. Returns
    its id and the start that worker wrote on its row."""
    job_id = schedule("tests.jobs.noop", max_attempts=max_attempts).id
    engine = get_engine()
    claimed = engine.claim("default", 1, 50).jobs
    assert [j.id for j in claimed] == [job_id]
    engine.mark_started(claimed)
    start = timezone.now() - timedelta(seconds=2)
    Job.objects.filter(pk=job_id).update(status="running", attempts=1, started_at=start,
                                         worker_id="victim:1")
    return job_id, start


def _recover_until(sent: list[tuple[str, dict[str, Any]]], name: str) -> dict[str, Any]:
    """A real worker's lease recovery, called until it sent ``name`` (the lease lapsed);
    then its audit written."""
    recovery = Worker(get_engine(), get_settings(), WorkerOptions(
        queues=("default",), concurrency=1, worker_id="w-recovers")).housekeeping.recovery
    deadline = time.monotonic() + 20
    while not any(n == name and kw["callable_path"] == "" for n, kw in sent):
        assert time.monotonic() < deadline, "the lease was never taken back"
        time.sleep(0.02)
        recovery.recover("default")
    recovery.audit.flush()
    return [kw for n, kw in sent if n == name and kw["callable_path"] == ""][-1]


def test_a_job_dead_by_lease_recovery_is_logged_at_error(sent, caplog):
    job_id, start = _lost(max_attempts=1)
    with caplog.at_level(logging.INFO, logger="django_delayq"):
        dead = _recover_until(sent, "job_dead")
    assert (dead["job_id"], dead["worker_id"], dead["error_type"]) == (job_id, "", LEASE_LOST)
    assert dead["started_at"] == start and Job.objects.get(pk=job_id).status == "dead"
    lines = [r for r in caplog.records if job_id in r.getMessage()]
    assert [(r.name, r.levelno) for r in lines] == [
        ("django_delayq.worker.settle", logging.ERROR)], lines
    assert "lease expired" in lines[0].getMessage() and "dead" in lines[0].getMessage()


def test_a_job_cancelled_by_lease_recovery_sends_what_the_docs_say(sent, caplog):
    job_id, start = _lost(max_attempts=3)
    assert cancel(job_id).name == "ALREADY_RUNNING"  # running: no retry; recovery ends it
    with caplog.at_level(logging.INFO, logger="django_delayq"):
        recovered = _recover_until(sent, "job_cancelled")
    assert recovered == {
        "signal": signals.job_cancelled, "sender": Job, "job_id": job_id, "queue": "default",
        "callable_path": "", "running": True, "worker_id": "", "error_type": LEASE_LOST,
        "error": recovered["error"], "started_at": start}
    assert recovered["error"].startswith("lease expired")
    assert Job.objects.get(pk=job_id).status == "cancelled"
    lines = [r for r in caplog.records if job_id in r.getMessage()]
    assert [(r.name, r.levelno) for r in lines] == [
        ("django_delayq.worker.housekeeping", logging.WARNING)], lines
