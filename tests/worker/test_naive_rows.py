"""A real worker with ``USE_TZ = False`` and a ``TIME_ZONE`` off UTC: every row it writes
(start, success with its result, a retry's and a death's ``JobAttempt``, an expiry, a time
limit, an atomic job's commit, progress) lands, with the local wall time of ``TIME_ZONE``
in its datetime columns, as the ORM stores them; so do the reconciler's final rows of a
worker gone silent. The instants are taken aware (UTC) around each run and compared in
``timezone.localtime``: a row holding UTC wall time would be an hour early."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core import periodic
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.core.reconcile_state import DEAD_IN_REDIS
from django_delayq.engine import NackOutcome
from django_delayq.models import Job, JobAttempt, JobStatus, Schedule
from django_delayq.worker.audit import AuditWriter
from tests import jobs_atomic
from tests.helpers import ALLOWED, burst, point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
ZONE = "Europe/Berlin"  # UTC+1 or +2: a UTC wall time is off by an hour or two


@pytest.fixture
def local(settings, redis_server) -> Iterator[None]:  # type: ignore[no-untyped-def]
    point_at(settings, redis_server,
             ALLOWED_CALLABLES=[*ALLOWED, "tests.jobs_atomic", "tests.jobs_more"])
    settings.USE_TZ, settings.TIME_ZONE = False, ZONE
    yield


def wall(moment: datetime) -> datetime:
    """``moment`` (aware) as a row stores it without ``USE_TZ``: its naive local time."""
    return timezone.localtime(moment).replace(tzinfo=None)


class Span:
    """Aware instants taken around what a block runs: a stored time inside it is the
    local wall time of an instant of the block."""

    def __enter__(self) -> Span:
        self.start = datetime.now(UTC)
        return self

    def __exit__(self, *exc: object) -> None:
        self.end = datetime.now(UTC)

    def holds(self, *stored: datetime | None) -> bool:
        return all(s is not None and s.tzinfo is None
                   and wall(self.start) <= s <= wall(self.end) for s in stored)


def times(row: Any) -> tuple[datetime | None, ...]:
    return row.started_at, row.finished_at, row.updated_at


def test_success_retry_dead_and_their_attempts(local) -> None:  # type: ignore[no-untyped-def]
    with Span() as span:
        ok = schedule("tests.jobs.add", 1, 2)
        retried = schedule("tests.jobs.ask_retry", 0)
        dead = schedule("tests.jobs.boom", "bad", max_attempts=1)
        assert burst() == 0
    assert ok.wait(timeout=5) == 3
    row = ok.job
    assert (row.status, row.result, row.attempts) == (JobStatus.SUCCEEDED, 3, 1)
    assert span.holds(row.run_at, *times(row)) and row.started_at <= row.finished_at
    row = retried.job
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)
    assert span.holds(*times(row))
    [first] = JobAttempt.objects.filter(job_id=retried.id)
    assert first.outcome == JobStatus.RETRYING and span.holds(first.started_at,
                                                              first.finished_at)
    assert first.finished_at <= row.started_at
    row = dead.job
    assert (row.status, row.error_type) == (JobStatus.DEAD, "builtins.RuntimeError")
    assert span.holds(*times(row))
    [attempt] = JobAttempt.objects.filter(job_id=dead.id)
    assert attempt.outcome == JobStatus.DEAD
    assert (attempt.started_at, attempt.finished_at) == (row.started_at, row.finished_at)


def test_expiry_time_limit_and_progress(local, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Span() as span:
        gone = schedule("tests.jobs.noop", expires=0.05)
        expires_at = gone.job.expires_at
        assert expires_at is not None and expires_at.tzinfo is None
        wait_until(lambda: wall(datetime.now(UTC)) > expires_at + timedelta(milliseconds=50))
        slow = schedule("tests.jobs.sleep_then_record", str(tmp_path / "out"), "late", 1.0,
                        timeout=0.2, max_attempts=1)
        steps = schedule("tests.jobs.report_steps", 3)
        assert burst() == 0
    row = gone.job
    assert (row.status, row.started_at) == (JobStatus.EXPIRED, None)
    assert span.holds(row.finished_at, row.updated_at)
    row = slow.job
    assert row.status == JobStatus.DEAD and "time limit" in row.last_error, row.last_error
    assert span.holds(*times(row))
    assert row.finished_at - row.started_at >= timedelta(seconds=0.2)
    row = steps.job
    assert (row.status, row.result, row.progress) == (JobStatus.SUCCEEDED, 3,
                                                      {"done": 3, "total": 3})
    assert span.holds(*times(row))


def test_atomic_commit(local) -> None:  # type: ignore[no-untyped-def]
    jobs_atomic.create_tables(["a"])
    with Span() as span:
        h = schedule("tests.jobs_atomic.bump", "a", atomic=True)
        assert burst() == 0
    row = h.job
    assert (row.status, row.result, jobs_atomic.counters()) == (JobStatus.SUCCEEDED, "a",
                                                                 {"a": 1})
    assert span.holds(*times(row))


def test_start_row_while_it_runs(local, tmp_path) -> None:  # type: ignore[no-untyped-def]
    gate = tmp_path / "gate"
    with Span() as span:
        h = schedule("tests.jobs.wait_then_work", str(tmp_path / "out"), "x", str(gate), 10.0)
        worker = threading.Thread(target=burst)
        worker.start()
        try:
            wait_until(lambda: h.job.status == JobStatus.RUNNING)
            running = h.job
        finally:
            gate.touch()
            worker.join(30)
    assert running.finished_at is None and span.holds(running.started_at, running.updated_at)
    assert h.job.status == JobStatus.SUCCEEDED


def _silent_running(job_id: str, worker_id: str) -> None:
    """The row as a worker's start flush wrote it; the worker has gone silent since."""
    engine = get_engine()
    Job.objects.filter(pk=job_id).update(status=JobStatus.RUNNING, attempts=1,
                                          worker_id=worker_id)
    engine.client.zadd("{%s}:workers" % get_settings().prefix,
                       {worker_id: engine.time_ms() - 3 * get_settings().lease_ms})


def test_the_reconcilers_final_rows_of_a_silent_worker(local) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    with Span() as span:
        dead = schedule("tests.jobs.noop", max_attempts=1)
        [job] = engine.claim("default", 1, 60_000).jobs
        assert engine.nack("default", [(job.id, job.token, None)]) == [NackOutcome.DEAD]
        done = schedule("tests.jobs.noop")
        [job] = engine.claim("default", 1, 60_000).jobs
        assert engine.ack("default", [(job.id, job.token)], holder="gone:1") == [True]
        _silent_running(dead.id, "w1")
        _silent_running(done.id, "gone:1")
        reconciler = Reconciler(engine, get_settings(), ("default",))
        reconciler.check_epochs()
        assert reconciler.run_all(grace_seconds=0) == 0
    row = dead.job
    assert (row.status, row.last_error) == (JobStatus.DEAD, DEAD_IN_REDIS)
    assert span.holds(row.finished_at, row.updated_at)
    [attempt] = JobAttempt.objects.filter(job_id=dead.id)
    assert attempt.finished_at == row.finished_at
    row = done.job
    assert (row.status, row.worker_id) == (JobStatus.SUCCEEDED, "gone:1")
    assert span.holds(row.finished_at, row.updated_at)


def test_a_schedules_ticks(local, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    with Span() as span:
        s = Schedule.objects.create(name="every-second", callable_path="tests.jobs.record",
                                    args=[str(out), "tick"], interval_seconds=1)
        first = periodic.keep(s)
        s.refresh_from_db()
        assert first is not None and s.next_job_id == first and s.next_tick_at is not None
        tick = Job.objects.get(pk=first)
        wait_until(lambda: wall(datetime.now(UTC)) >= tick.run_at, timeout=5)
        assert burst() == 0
        s.refresh_from_db()
    assert Job.objects.get(pk=first).status == JobStatus.SUCCEEDED and out.exists()
    assert s.last_job_id == first and s.next_job_id not in ("", first)
    assert s.last_tick_at is not None and s.next_tick_at is not None
    assert span.holds(s.last_tick_at) and s.next_tick_at == s.last_tick_at + timedelta(seconds=1)
    assert Job.objects.get(pk=s.next_job_id).run_at == s.next_tick_at
    assert periodic.keep(s) == s.next_job_id  # pending: kept as it is


def test_a_cron_schedules_tick(local) -> None:  # type: ignore[no-untyped-def]
    s = Schedule.objects.create(name="hourly", callable_path="tests.jobs.noop", cron="0 * * * *",
                                time_zone="Asia/Kolkata")
    first = periodic.keep(s)
    s.refresh_from_db()
    assert first is not None and s.next_tick_at is not None
    assert s.next_tick_at.tzinfo is None
    tick = timezone.localtime(periodic.tick_of_key(Job.objects.get(pk=first).key))
    assert s.next_tick_at == tick.replace(tzinfo=None) == Job.objects.get(pk=first).run_at
    assert tick.astimezone(ZoneInfo("Asia/Kolkata")).minute == 0


def test_a_final_row_written_early_and_its_attempt_once(local) -> None:  # type: ignore[no-untyped-def]
    """The early rows' write (``AuditWriter.write_now``, during a Redis outage), then the
    settlement's record of the same attempt: the attempt is not written twice (its start,
    converted the same way both times, keys it)."""
    h = schedule("tests.jobs.noop")
    start = datetime.now(UTC)
    end = start + timedelta(milliseconds=5)
    audit = AuditWriter()
    attempt = {"job_id": h.id, "number": 1, "outcome": JobStatus.DEAD, "started_at": start,
               "finished_at": end, "error": "bad", "worker_id": "w"}
    audit.write_now({h.id: {"status": JobStatus.DEAD, "started_at": start, "finished_at": end,
                            "attempts": 1, "worker_id": "w", "updated_at": end}},
                    [JobAttempt(**attempt)])
    audit.attempt(**attempt)
    audit.flush()
    row = h.job
    assert (row.status, row.started_at, row.finished_at) == (JobStatus.DEAD, wall(start),
                                                            wall(end))
    [stored] = JobAttempt.objects.filter(job_id=h.id)
    assert (stored.started_at, stored.finished_at) == (wall(start), wall(end))


def test_a_schedule_from_settings_with_a_start(local, settings) -> None:  # type: ignore[no-untyped-def]
    """``DELAYQ["SCHEDULES"]``'s ``start`` (aware) is stored as its local wall time, and a
    second sync finds the row unchanged (no new version, its tick job kept)."""
    start = datetime(2030, 1, 15, 1, 0, tzinfo=UTC)
    settings.DELAYQ = {**settings.DELAYQ, "SCHEDULES": {"daily": {
        "callable": "tests.jobs.noop", "interval": 86400, "start": start}}}
    assert periodic.sync_from_settings() == 0
    s = Schedule.objects.get(name="daily")
    periodic.keep(s)
    s.refresh_from_db()
    assert s.start_at == wall(start) == s.next_tick_at
    assert Job.objects.get(pk=s.next_job_id).run_at == wall(start)
    version, job_id = s.version, s.next_job_id
    assert periodic.sync_from_settings() == 0
    s.refresh_from_db()
    assert (s.version, s.next_job_id) == (version, job_id)
