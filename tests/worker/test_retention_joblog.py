"""Retention (old finished rows deleted by the workers), the workers registry forgetting
dead workers, and the worker's one log line per job event."""

from __future__ import annotations

import logging
import signal
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core.conf import get_settings, problems
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.retention import BATCH, delete_batch, forget_after_ms
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import burst, wait_until
from tests.worker.conftest import worker_starter

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def start_quick_rounds(delayq_settings, tmp_path):  # type: ignore[no-untyped-def]
    """Workers whose retention rounds come every second, not every ``INTERVAL_S``."""
    yield from worker_starter(delayq_settings, tmp_path, entry=("tests.worker.retention_rounds",))


def _rows(prefix: str, n: int, status: str, days_ago: float, attempts: int = 0) -> None:
    when = timezone.now() - timedelta(days=days_ago)
    live = status in (JobStatus.SCHEDULED, JobStatus.RETRYING)
    Job.objects.bulk_create([
        Job(id="%s%05d" % (prefix, i), queue="default", callable_path="tests.jobs.add",
            status=status, run_at=when, created_at=when, updated_at=when,
            finished_at=None if live else when, max_attempts=5, attempts=attempts)
        for i in range(n)])
    JobAttempt.objects.bulk_create([
        JobAttempt(job_id="%s%05d" % (prefix, i), number=k, outcome=JobStatus.RETRYING,
                   finished_at=when)
        for i in range(n) for k in range(1, attempts + 1)])


def _ids(prefix: str) -> int:
    return Job.objects.filter(pk__startswith=prefix).count()


def test_delete_batch_takes_only_rows_past_their_status_retention(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    _rows("old", BATCH + 20, JobStatus.SUCCEEDED, 8, attempts=2)
    _rows("new", 10, JobStatus.SUCCEEDED, 6)
    _rows("dead", 10, JobStatus.DEAD, 8, attempts=1)
    _rows("live", 5, JobStatus.RETRYING, 40, attempts=1)
    assert delete_batch("succeeded", 7) == (BATCH, 2 * BATCH)  # one batch, with attempts
    assert delete_batch("succeeded", 7) == (20, 40)
    assert delete_batch("succeeded", 7) == (0, 0)
    assert delete_batch("dead", 30) == (0, 0)
    assert (_ids("old"), _ids("new"), _ids("dead"), _ids("live")) == (0, 10, 10, 5)
    assert JobAttempt.objects.count() == 10 + 5  # the dead rows' and the live rows'


def test_retention_setting_is_checked_and_merged_with_the_defaults(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    assert dict(get_settings().retention) == {"succeeded": 7, "cancelled": 7, "expired": 30,
                                               "dead": 30}
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "RETENTION": {"succeeded_days": 1, "dead_days": None}}
    assert dict(get_settings().retention) == {"succeeded": 1, "cancelled": 7, "expired": 30}
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "RETENTION": None}
    assert get_settings().retention == ()
    for bad in ({"failed_days": 3}, {"dead_days": 0}, {"dead_days": "30"}, [7]):
        found = problems({"RETENTION": bad})
        assert [k for k, _ in found] == ["RETENTION"] and repr(bad) in found[0][1], bad
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "LOG_JOBS": "yes"}
    with pytest.raises(ImproperlyConfigured, match="LOG_JOBS"):
        get_settings()


@pytest.mark.worker
def test_a_real_worker_deletes_old_rows_in_batches_and_forgets_dead_workers(
        delayq_settings, start_quick_rounds) -> None:  # type: ignore[no-untyped-def]
    _rows("old", 2 * BATCH + 100, JobStatus.SUCCEEDED, 8, attempts=2)
    _rows("gone", 30, JobStatus.DEAD, 31, attempts=3)
    _rows("cold", 30, JobStatus.CANCELLED, 8)
    _rows("keep", 40, JobStatus.DEAD, 8, attempts=1)  # dead rows are kept 30 days
    _rows("warm", 40, JobStatus.SUCCEEDED, 6)
    _rows("live", 20, JobStatus.SCHEDULED, 40)
    engine = get_engine()
    registry = "{%s}:workers" % get_settings().prefix
    forget_ms = forget_after_ms(get_settings())
    engine.client.zadd(registry, {"killed": engine.time_ms() - forget_ms - 5000,
                                  "quiet": engine.time_ms() - forget_ms // 2})
    proc = start_quick_rounds("--worker-id", "a-worker", "--concurrency", "1")
    wait_until(lambda: _ids("old") + _ids("gone") + _ids("cold") == 0, timeout=120, step=0.5)
    assert (_ids("keep"), _ids("warm"), _ids("live")) == (40, 40, 20)
    attempts = JobAttempt.objects.values_list("job_id", flat=True)
    assert sorted({job_id[:4] for job_id in attempts} - {"live"}) == ["keep"]
    assert len([job_id for job_id in attempts if job_id.startswith("keep")]) == 40
    beats = [w.id for w in engine.workers()]
    assert "killed" not in beats and "quiet" in beats
    assert any(b.startswith("a-worker:") for b in beats)  # the name plus a start token
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK
    assert [w.id for w in engine.workers()] == ["quiet"]  # a clean stop deregisters


@pytest.mark.worker
def test_every_clean_exit_deregisters(delayq_settings, start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    for args in (["--burst"], ["--max-jobs", "2"]):
        for i in range(3):
            schedule("tests.jobs.add", i, i)
        proc = start_worker("--worker-id", "w-%s" % args[0], *args)
        assert proc.wait(60) == EXIT_OK
        assert get_engine().workers() == [], args


def _job_lines(caplog) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.getMessage() for r in caplog.records
            if r.name == "django_delayq.worker.joblog" and r.levelno == logging.INFO]


def test_one_info_line_per_start_success_and_retry(delayq_settings, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="django_delayq")
    ok = schedule("tests.jobs.add", 1, 2, queue="emails")
    bad = schedule("tests.jobs.boom", "card declined", max_attempts=3, backoff=[600, 600])
    assert burst(("default", "emails")) == EXIT_OK
    lines = _job_lines(caplog)
    assert len(lines) == 4, lines
    started = [line for line in lines if line.endswith(" started")]
    assert sorted(started) == sorted([
        "job %s tests.jobs.add queue=emails attempt=1 started" % ok.id,
        "job %s tests.jobs.boom queue=default attempt=1 started" % bad.id])
    [success] = [line for line in lines if "succeeded" in line]
    assert success.startswith("job %s tests.jobs.add queue=emails attempt=1 succeeded in "
                              % ok.id) and success.endswith("s")
    [retry] = [line for line in lines if "failed" in line]
    assert retry.startswith("job %s tests.jobs.boom queue=default attempt=1 failed in "
                            % bad.id)
    assert "retry at " in retry and retry.endswith("builtins.RuntimeError: card declined")


def test_log_jobs_false_quiets_them(delayq_settings, caplog) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "LOG_JOBS": False}
    caplog.set_level(logging.INFO, logger="django_delayq")
    schedule("tests.jobs.add", 1, 2)
    schedule("tests.jobs.boom", "x", max_attempts=2, backoff=[600])
    assert burst() == EXIT_OK
    assert _job_lines(caplog) == []
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 1
