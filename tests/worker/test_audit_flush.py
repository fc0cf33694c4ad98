"""A flush asked for while the audit thread is writing waits for that write: the worker
relies on "flushed" meaning "in the database" before it hands jobs back to Redis."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from django_delayq import schedule
from django_delayq.models import Job
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
