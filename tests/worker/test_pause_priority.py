"""Pause and priority end to end: a real worker, a real Redis, the audit rows."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from django_delayq import pause_queue, resume_queue, schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from django_delayq.worker.runner import ms_to_dt
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import burst, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def tags(path: Path) -> list[str]:
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def test_a_paused_queue_keeps_its_jobs_and_due_times_and_runs_them_after_resume(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    engine = get_engine()
    pause_queue("default")
    held = schedule("tests.jobs.record", str(out), "held")  # accepted while paused
    due_ms = engine.inspect("default", held.id).score_ms
    other = schedule("tests.jobs.record", str(out), "other", queue="emails")
    assert burst(("default", "emails")) == EXIT_OK  # what is due and not paused ran
    assert tags(out) == ["other"] and other.status == JobStatus.SUCCEEDED
    loc = engine.inspect("default", held.id)
    assert (loc.place, loc.score_ms, loc.attempts) == ("pending", due_ms, 0)
    assert held.status == JobStatus.SCHEDULED
    resumed_ms = engine.time_ms()
    resume_queue("default")
    assert burst(("default", "emails")) == EXIT_OK
    assert tags(out) == ["other", "held"]
    row = held.job
    assert row.status == JobStatus.SUCCEEDED and row.attempts == 1
    # lateness counts from the due time the job had, not from the resume
    assert abs((row.run_at - ms_to_dt(due_ms)).total_seconds()) < 0.002
    lateness = row.lateness_ms()
    assert lateness is not None and lateness >= resumed_ms - due_ms


def test_a_running_worker_claims_nothing_from_a_paused_queue_and_does_not_spin(delayq_settings, redis_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    pause_queue("default")
    held = schedule("tests.jobs.record", str(out), "held")
    worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",)))
    thread = threading.Thread(target=worker.run)
    thread.start()
    client = redis.Redis.from_url(redis_server.url)
    try:
        wait_until(lambda: "default" in worker.claiming.queue_gate.paused, timeout=20)
        before = sum(s["calls"] for s in client.info("commandstats").values())
        time.sleep(2.0)  # an observation window: a spinning loop would make thousands of calls
        calls = sum(s["calls"] for s in client.info("commandstats").values()) - before
        assert calls < 200, calls
        assert held.status == JobStatus.SCHEDULED and not out.exists()
        resume_queue("default")  # publishes a wake-up: the worker claims it at once
        wait_until(lambda: held.status == JobStatus.SUCCEEDED, timeout=20)
        assert tags(out) == ["held"]
    finally:
        worker.request_stop()
        thread.join(30)
        client.close()
    assert not thread.is_alive()


def test_one_thread_runs_due_jobs_by_priority_then_due_time(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    base = datetime.now(UTC) - timedelta(seconds=30)
    plan = [  # (tag, priority, seconds after base it was due), in the order scheduled
        ("low", -5, 0.0), ("mid-2", 0, 2.0), ("high-2", 50, 3.0), ("mid-0", 0, 0.1),
        ("top", 100, 5.0), ("mid-1", 0, 1.0), ("high-1", 50, 0.5), ("lowest", -100, 0.0),
    ]
    for tag, priority, offset in plan:
        schedule("tests.jobs.record", str(out), tag, priority=priority,
                 at=base + timedelta(seconds=offset))
    assert burst(("default",), concurrency=1) == EXIT_OK
    assert tags(out) == ["top", "high-1", "high-2", "mid-0", "mid-1", "mid-2", "low", "lowest"]
