"""What the reconciler writes when it ends a live row for good, path by path: a row whose
id can never be enqueued (ended ``dead``), and rows of jobs final in Redis (dead, settled
from a worker's record, cancelled while they ran). Each: the row's values, its dead
attempt, the signal with its arguments, and a WARNING line saying what happened."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.dispatch import Signal

from django_delayq import cancel, schedule, signals
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.core.reconcile_state import CANCELLED_IN_REDIS, DEAD_IN_REDIS
from django_delayq.engine import Engine, NackOutcome
from django_delayq.models import Job, JobAttempt, JobStatus
from tests.helpers import point_at

pytestmark = pytest.mark.django_db(transaction=True)

BAD_ID = "bad\x01id"
INVALID_ROW = "django_delayq.exceptions.InvalidRow"
WORKER_LOST = "django_delayq.exceptions.WorkerLost"


@pytest.fixture
def engine(settings, redis_server) -> Engine:  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    return get_engine()


@pytest.fixture
def sent() -> Iterator[list[tuple[Signal, dict[str, Any]]]]:
    """The job signals sent, each with its arguments (``sender`` and ``signal`` left out)."""
    got: list[tuple[Signal, dict[str, Any]]] = []
    hooked = (signals.job_dead, signals.job_succeeded, signals.job_cancelled)

    def receiver(sender: object, signal: Signal, **kwargs: Any) -> None:
        got.append((signal, kwargs))

    for s in hooked:
        s.connect(receiver, weak=False)
    yield got
    for s in hooked:
        s.disconnect(receiver)


def _reconciler(engine: Engine) -> Reconciler:
    r = Reconciler(engine, get_settings(), ("default",))
    r.check_epochs()
    return r


def _line(caplog: pytest.LogCaptureFixture, job_id: str) -> str:
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
              and r.getMessage().startswith("reconciler: job %s" % job_id)]
    return line


def _silent_running(engine: Engine, job_id: str, worker_id: str) -> None:
    """The row as a worker's start flush wrote it; the worker has gone silent since."""
    Job.objects.filter(pk=job_id).update(status=JobStatus.RUNNING, attempts=1,
                                          worker_id=worker_id)
    engine.client.zadd("{%s}:workers" % get_settings().prefix,
                       {worker_id: engine.time_ms() - 3 * get_settings().lease_ms})


def test_a_row_whose_id_cannot_be_enqueued(engine, sent, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.WARNING, logger="django_delayq")
    h = schedule("tests.jobs.noop")
    row = Job.objects.get(pk=h.id)
    row.pk = BAD_ID
    row.save(force_insert=True)  # as someone with database access could
    engine.purge("default")
    _reconciler(engine).run_all(assume_lost=True)
    row = Job.objects.get(pk=BAD_ID)
    reason = "invalid row: id has control characters: it cannot be enqueued"
    assert (row.status, row.attempts, row.last_error, row.error_type, row.traceback,
            row.worker_id) == (JobStatus.DEAD, 1, reason, INVALID_ROW, "", "")
    assert row.finished_at == row.updated_at
    assert list(JobAttempt.objects.filter(job_id=BAD_ID).values_list(
        "number", "outcome", "finished_at", "error_type", "error")) == [
        (1, JobStatus.DEAD, row.finished_at, INVALID_ROW, reason)]
    assert sent == [(signals.job_dead, {
        "job_id": BAD_ID, "queue": "default", "callable_path": "tests.jobs.noop",
        "attempt": 1, "worker_id": "", "error": reason, "error_type": INVALID_ROW,
        "started_at": None})]
    line = _line(caplog, "bad\\x01id")
    assert "default" in line and reason in line and "dead" in line


def test_a_row_of_a_job_dead_in_redis(engine, sent, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.WARNING, logger="django_delayq")
    h = schedule("tests.jobs.noop", max_attempts=1)
    [job] = engine.claim("default", 1, 60_000).jobs
    assert engine.nack("default", [(job.id, job.token, None)]) == [NackOutcome.DEAD]
    _silent_running(engine, h.id, "w1")
    assert _reconciler(engine).run_all(grace_seconds=0) == 0
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.attempts, row.last_error, row.error_type, row.traceback,
            row.worker_id) == (JobStatus.DEAD, 1, DEAD_IN_REDIS, WORKER_LOST, "", "w1")
    assert row.finished_at <= row.updated_at  # when Redis saw it die
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list(
        "number", "outcome", "finished_at", "error_type", "error")) == [
        (1, JobStatus.DEAD, row.finished_at, WORKER_LOST, DEAD_IN_REDIS)]
    assert sent == [(signals.job_dead, {
        "job_id": h.id, "queue": "default", "callable_path": "tests.jobs.noop",
        "attempt": 1, "worker_id": "", "error": DEAD_IN_REDIS, "error_type": WORKER_LOST,
        "started_at": None})]
    line = _line(caplog, h.id)
    assert DEAD_IN_REDIS in line and "running" in line and "attempt 1" in line
    assert line.endswith("dead")


def test_a_row_settled_from_its_workers_record(engine, sent, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.WARNING, logger="django_delayq")
    h = schedule("tests.jobs.noop")
    [job] = engine.claim("default", 1, 60_000).jobs
    assert engine.ack("default", [(job.id, job.token)], holder="gone:1") == [True]
    _silent_running(engine, h.id, "gone:1")
    assert _reconciler(engine).run_all(grace_seconds=0) == 0
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.attempts, row.error_type, row.traceback, row.worker_id) == (
        JobStatus.SUCCEEDED, 1, "", "", "gone:1")
    assert not JobAttempt.objects.filter(job_id=h.id).exists()
    assert sent == [(signals.job_succeeded, {
        "job_id": h.id, "queue": "default", "callable_path": "tests.jobs.noop",
        "attempt": 1, "worker_id": "gone:1", "result": None, "duration": None})]
    assert _line(caplog, h.id).endswith("succeeded")


def test_a_running_row_whose_cancel_was_asked(engine, sent, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.WARNING, logger="django_delayq")
    h = schedule("tests.jobs.noop")
    [job] = engine.claim("default", 1, 60_000).jobs
    cancel(h.id)  # asked while it ran: the row says so
    assert engine.ack("default", [(job.id, job.token)]) == [True]
    _silent_running(engine, h.id, "w2")
    sent.clear()  # cancel() sent its own
    assert _reconciler(engine).run_all(grace_seconds=0) == 0
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.attempts, row.last_error, row.error_type, row.worker_id) == (
        JobStatus.CANCELLED, 1, CANCELLED_IN_REDIS, "", "w2")
    assert row.finished_at == row.updated_at
    assert sent == [(signals.job_cancelled, {
        "job_id": h.id, "queue": "default", "callable_path": "tests.jobs.noop",
        "running": True})]
    assert _line(caplog, h.id).endswith("cancelled")
