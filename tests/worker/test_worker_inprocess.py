"""The Worker class in this process (threads, real Redis, real database)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import DatabaseError

from django_delayq import JobHandle, schedule
from django_delayq.core import payloads
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine import NewJob
from django_delayq.engine.envelope import Envelope
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.testing import run_due_jobs
from django_delayq.worker import held_cancels
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_sync_and_async_jobs_succeed(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    a = schedule("tests.jobs.add", 1, 2)
    b = schedule("tests.jobs.async_add", a=3, b=4)
    c = schedule("tests.jobs.echo_context", queue="emails")
    assert run_due_jobs() == 3
    assert (a.job.status, a.job.result) == (JobStatus.SUCCEEDED, 3)
    assert (b.job.status, b.job.result) == (JobStatus.SUCCEEDED, 7)
    assert c.job.result == {"attempt": 1, "queue": "emails", "id": c.id}
    row = a.job
    assert row.attempts == 1 and row.worker_id and row.started_at and row.finished_at
    assert row.lateness_ms() is not None


def test_failure_retries_with_backoff_then_dies(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.boom", "bad", max_attempts=3, backoff=[0, 0])
    run_due_jobs()  # attempt 1 fails; retry due immediately
    run_due_jobs()
    run_due_jobs()
    row = h.job
    assert row.status == JobStatus.DEAD and row.attempts == 3
    assert (row.error_type, row.last_error) == ("builtins.RuntimeError", "bad")
    assert "Traceback" in row.traceback and "RuntimeError: bad" in row.traceback
    history = list(JobAttempt.objects.filter(job_id=h.id).values_list(
        "number", "outcome", "error_type", "error"))
    assert history == [(n, outcome, "builtins.RuntimeError", "bad") for n, outcome in
                       ((1, "retrying"), (2, "retrying"), (3, "dead"))]
    assert get_engine().inspect("default", h.id).place == "dead"


def test_retry_waits_for_its_backoff(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.boom", backoff=[3600])
    run_due_jobs()
    assert h.job.status == JobStatus.RETRYING
    assert run_due_jobs() == 0
    loc = get_engine().inspect("default", h.id)
    assert loc.place == "pending" and loc.score_ms > get_engine().time_ms() + 3_500_000


def test_job_may_ask_for_retry(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.ask_retry", 0)
    assert run_due_jobs() == 2  # the retry is due at once, so the same burst runs it
    assert h.job.status == JobStatus.SUCCEEDED and h.job.attempts == 2
    [attempt] = JobAttempt.objects.filter(job_id=h.id)
    assert attempt.outcome == "retrying" and "retry requested" in attempt.error


def _raw(queue: str, job_id: str, envelope: str) -> None:
    get_engine().enqueue(queue, [NewJob(id=job_id, envelope=envelope)])
    now = __import__("django.utils.timezone", fromlist=["now"]).now()
    Job.objects.create(id=job_id, queue=queue, callable_path="?", run_at=now, max_attempts=3)


def test_payload_outside_allow_list_never_runs(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "ran"
    _raw("default", "evil", Envelope(path="os.system", args=["touch %s" % marker]).encode())
    _raw("default", "junk", "this is not json")
    run_due_jobs()
    evil, junk = Job.objects.get(pk="evil"), Job.objects.get(pk="junk")
    # The envelopes in Redis are ignored: what ran is each row's callable ("?": refused).
    for row in (evil, junk):
        assert row.status == JobStatus.DEAD and row.last_error.startswith("not allowed: '?'")
        assert row.error_type == "django_delayq.core.registry.NotAllowed"
    assert not marker.exists()


def test_idle_worker_wakes_for_an_earlier_job(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """A job enqueued while the worker sleeps toward a later one runs on time."""
    from django_delayq.core.conf import get_settings
    from django_delayq.worker.loop import Worker, WorkerOptions

    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "WAKE_INTERVAL_SECONDS": 30}
    worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",)))
    later = schedule("tests.jobs.noop", delay=60)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        time.sleep(0.3)  # the worker is now waiting toward `later`
        soon = schedule("tests.jobs.noop", delay=0.2)
        wait_until(lambda: soon.job.status == JobStatus.SUCCEEDED, timeout=5)
        row = soon.job
        assert row.lateness_ms() < 1000
        assert later.job.status == JobStatus.SCHEDULED
    finally:
        worker.request_stop()
        thread.join(10)
    assert not thread.is_alive()


def test_payload_is_read_from_the_row(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """Redis holds the id only: what runs is what the row says, and a row whose arguments
    were damaged ends dead with the reason; an id with no row at all ends dead in Redis."""
    good = schedule("tests.jobs.add", 2, 3)
    bad = schedule("tests.jobs.add", 2, 3)
    Job.objects.filter(pk=bad.id).update(args={"not": "a list"})
    get_engine().enqueue("default", [NewJob(id="ghost")])
    run_due_jobs()
    assert good.job.status == JobStatus.SUCCEEDED and good.job.result == 5
    assert bad.job.status == JobStatus.DEAD and "wrong types" in bad.job.last_error
    assert bad.job.error_type == "django_delayq.exceptions.InvalidRow"
    assert get_engine().inspect("default", "ghost").place == "dead"


class _ReadsFromAReplica:
    """A router sending reads to a replica alias that does not even exist here."""

    def db_for_read(self, model, **hints):  # type: ignore[no-untyped-def]
        return "replica"


def test_payloads_are_read_where_rows_are_written(delayq_settings, settings) -> None:  # type: ignore[no-untyped-def]
    """A lagging read replica could miss a row committed a millisecond ago: payloads (and
    the rows of expired leases) come from the database the rows are written to."""
    h = schedule("tests.jobs.add", 20, 22)
    settings.DATABASE_ROUTERS = [__name__ + "._ReadsFromAReplica"]
    [job] = payloads.load(get_engine().claim("default", 10, 60_000, now_ms=10**14).jobs)
    assert job.payload is not None and job.payload.args == [20, 22]
    assert payloads.lease_rows([h.id]) == {h.id: (3, 0, None, "", "scheduled")}


def test_database_down_at_claim_hands_the_jobs_back(delayq_settings, caplog) -> None:  # type: ignore[no-untyped-def]
    """The payloads cannot be read (the table is gone for a moment): the claimed jobs go
    back to Redis with no attempt charged, the loop backs off, and they run afterwards."""
    from django.db import connection

    from django_delayq.core.conf import get_settings
    from django_delayq.worker.loop import Worker, WorkerOptions

    h = schedule("tests.jobs.add", 1, 1)
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute('ALTER TABLE "%s" RENAME TO "%s_away"' % (table, table))
    worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",)))
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_until(lambda: "worker loop step failed" in caplog.text, timeout=10)
        loc = get_engine().inspect("default", h.id)
        assert (loc.place, loc.attempts) in {("pending", 0), ("inflight", 1)}
    finally:
        with connection.cursor() as cursor:
            cursor.execute('ALTER TABLE "%s_away" RENAME TO "%s"' % (table, table))
    try:
        wait_until(lambda: h.job.status == JobStatus.SUCCEEDED, timeout=15)
        assert (h.job.attempts, h.job.result) == (1, 2)
    finally:
        worker.request_stop()
        thread.join(10)
    assert not thread.is_alive()


def test_a_job_whose_cancel_cannot_be_read_is_deferred_then_runs_once(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch, tmp_path) -> None:
    """A thread comes to a held job whose row's read is too old (every one is here) and
    cannot read its cancel again (the database down): the job does not start, it goes
    back to Redis pending, no attempt charged; once the read works it runs, once."""
    monkeypatch.setattr(held_cancels, "FRESH_S", -1.0)  # every start reads its cancel
    marker = tmp_path / "ran.txt"
    real, failed = payloads.cancels_asked, []

    def down(ids: object) -> set[str]:
        failed.append(ids)
        raise DatabaseError("the database is down")

    monkeypatch.setattr(payloads, "cancels_asked", down)
    worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",)))
    h = schedule("tests.jobs.record", str(marker), "ran")
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        try:  # deferred: back in Redis (each time it is claimed again, while reads fail)
            wait_until(lambda: marker.exists() or bool(failed) and
                       get_engine().inspect("default", h.id).place == "pending", timeout=60)
            assert not marker.exists()  # not started while its cancel could not be read
            assert get_engine().inspect("default", h.id).attempts == 0
            assert h.job.attempts == 0 and h.job.status != JobStatus.SUCCEEDED
        finally:
            monkeypatch.setattr(payloads, "cancels_asked", real)  # the database is back
        wait_until(lambda: h.job.status == JobStatus.SUCCEEDED, timeout=60)
        assert h.job.attempts == 1
        assert marker.read_text().split() == ["ran", h.id, "1", str(os.getpid())]
    finally:
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()


@contextlib.contextmanager
def one_job_held(tmp_path: Path) -> Iterator[tuple[Worker, JobHandle, Path, threading.Thread]]:
    """A one-thread worker of this process (its thread) running a job that waits for the
    file ``gate`` (then records "slow" in ``tmp_path / "runs"``): (worker, the job, gate,
    thread), the job running. At the end the gate opens and the worker stops hard."""
    gate = tmp_path / "gate"
    h = schedule("tests.jobs.wait_then_work", str(tmp_path / "runs"), "slow", str(gate), 0)
    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("default",), concurrency=1))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: h.status == JobStatus.RUNNING)
        yield worker, h, gate, thread
    finally:
        gate.touch()
        worker.stop_hard("the test's end")
        thread.join(10)


def test_a_drain_names_the_running_jobs_it_waits_for(delayq_settings, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """The operator who pressed Ctrl-C learns what the drain waits for (it said only
    "draining", then nothing until the jobs ended)."""
    with one_job_held(tmp_path) as (worker, h, gate, thread):
        with caplog.at_level(logging.INFO, logger="django_delayq.worker.loop"):
            worker.request_stop()
        note = next(r.getMessage() for r in caplog.records if "draining (" in r.getMessage())
        assert "waiting for 1 running job" in note and h.id in note, note
        gate.touch()
        thread.join(60)
        assert not thread.is_alive() and h.status == JobStatus.SUCCEEDED
