"""Lease recovery runs on the worker's main loop: it never waits on the database to write
the lost attempts (a writer holding the lock, as an atomic job's transaction on SQLite,
would stall claims, time limits and the other queues' recovery). It asks the audit
writer's thread to write them at once instead.

Real locking (another connection's open write transaction: SQLite's database lock, a
PostgreSQL row lock), a real redis-server."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections, transaction

from django_delayq import schedule, signals
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.housekeeping import LeaseRecovery
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_LOST = "django_delayq.exceptions.LeaseLost"


def _lapsed() -> str:
    """A job claimed with a 50 ms lease nobody extends, its run started."""
    h = schedule("tests.jobs.noop", max_attempts=3)
    engine = get_engine()
    claimed = engine.claim("default", 1, 50).jobs
    assert [j.id for j in claimed] == [h.id]
    engine.mark_started(claimed)
    return h.id


def _recover_until_retrying(recovery: LeaseRecovery, job_id: str) -> float:
    """Call ``recover`` as the main loop does until ``job_id``'s lease is taken back;
    returns the longest call, in seconds."""
    seen: list[str] = []

    def note(*, job_id: str, **kwargs: object) -> None:
        seen.append(job_id)

    signals.job_retrying.connect(note, weak=False)
    longest = 0.0
    try:
        deadline = time.monotonic() + 30
        while job_id not in seen and time.monotonic() < deadline:
            t0 = time.monotonic()
            recovery.recover("default")
            longest = max(longest, time.monotonic() - t0)
            time.sleep(0.02)
    finally:
        signals.job_retrying.disconnect(note)
    assert job_id in seen, "the lease was not taken back"
    return longest


def test_recovery_does_not_wait_for_a_writer_holding_the_database(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    lost = _lapsed()
    audit = AuditWriter()
    audit.start()  # as in the worker: its own thread flushes
    recovery = LeaseRecovery(get_engine(), get_settings(), audit)
    held, release = threading.Event(), threading.Event()

    def writer() -> None:  # an atomic job holding the lock for its whole run: on SQLite
        try:  # the database's, on PostgreSQL the row's the lost attempt is written to
            with transaction.atomic():
                Job.objects.filter(pk=lost).update(priority=1)
                held.set()
                release.wait(20)
        finally:
            connections.close_all()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert held.wait(10)
        longest = _recover_until_retrying(recovery, lost)
        assert longest < 2.0, "recover() waited %.1fs on the database" % longest
        assert not JobAttempt.objects.filter(job_id=lost).exists()  # the lock is held
        release.set()
        thread.join()
        # the writer's thread writes the lost attempt once the lock is free
        wait_until(lambda: JobAttempt.objects.filter(job_id=lost, number=1,
                                                     error_type=LEASE_LOST).exists(), 30)
        assert Job.objects.get(pk=lost).status == "retrying"
    finally:
        release.set()
        thread.join()
        audit.stop()


def test_recovery_has_the_lost_attempts_written_at_once(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """The audit writer's thread flushes at once when asked, not after its interval."""
    lost = _lapsed()
    audit = AuditWriter(flush_seconds=3600)
    audit.start()
    try:
        recovery = LeaseRecovery(get_engine(), get_settings(), audit)
        _recover_until_retrying(recovery, lost)
        wait_until(lambda: JobAttempt.objects.filter(job_id=lost, number=1,
                                                     error_type=LEASE_LOST).exists(), 30)
    finally:
        audit.stop()
