"""A flush asked for while the audit thread is writing waits for that write: the worker
relies on "flushed" meaning "in the database" before it hands jobs back to Redis."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime

import pytest
from django.db import connections

from django_delayq import schedule, schedule_many
from django_delayq.core.options import JobSpec
from django_delayq.models import Job, JobStatus
from django_delayq.worker.audit import AuditWriter

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_flush_waits_for_the_batch_the_thread_is_writing(delayq_settings) -> None:
    job_id = schedule("tests.jobs.noop", delay=3600).id
    writer = AuditWriter(0.01, 500)
    writing, go_on = threading.Event(), threading.Event()

    def hold_the_first_write() -> None:
        if not writing.is_set():
            writing.set()
            assert go_on.wait(30)

    writer.before_write = hold_the_first_write
    writer.start()
    try:
        writer.update(job_id, worker_id="w-held")
        assert writing.wait(30)  # the thread has taken the change, not yet written it
        done = threading.Event()

        def flush() -> None:
            try:
                writer.flush()
                done.set()
            finally:
                connections.close_all()  # this thread's own connection

        waiter = threading.Thread(target=flush)
        waiter.start()
        assert not done.wait(0.2)  # waiting for the thread's batch
        go_on.set()
        assert done.wait(30)
        assert Job.objects.get(pk=job_id).worker_id == "w-held"
        waiter.join(30)
    finally:
        go_on.set()
        writer.stop()


@pytest.mark.skipif(connections["default"].vendor != "sqlite", reason="SQLite's limit")
def test_a_flush_of_more_final_rows_than_the_database_takes_parameters_lands(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """A buffer grown during a database stall is written in one flush: the look at which
    rows it made final stays within the database's limit on a statement's parameters
    (SQLite's is 32,766 on many builds, 999 on old ones: lowered here to 999)."""
    ids = schedule_many("tests.jobs.noop", [JobSpec(delay=3600) for _ in range(1200)])
    now = datetime.now(UTC)
    writer = AuditWriter()
    for job_id in ids:
        writer.update(job_id, status=JobStatus.SUCCEEDED, attempts=1, worker_id="w",
                      finished_at=now, updated_at=now)
    connections["default"].ensure_connection()
    raw = connections["default"].connection
    kept = raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    try:
        assert writer.flush() == 1200
    finally:
        raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, kept)
    assert Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == 1200
