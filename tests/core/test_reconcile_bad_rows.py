"""A row whose values the reconciler cannot use (written by raw SQL, as someone with
database access could: SQLite keeps text in an integer column, PostgreSQL takes a count
whose next attempt does not fit) ends ``dead`` alone, its reason naming the field and the
value; the tick goes on and puts back the other jobs missing from Redis."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from django.db import connection
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job, JobAttempt, JobStatus
from tests.helpers import point_at, wait_until

if TYPE_CHECKING:
    from django_delayq.engine import Engine

pytestmark = pytest.mark.django_db(transaction=True)

INVALID_ROW = "django_delayq.exceptions.InvalidRow"
ON_SQLITE = connection.vendor == "sqlite"
# text on SQLite (as the audit wrote); on PostgreSQL, whose integer columns refuse text,
# the highest count the column takes: its next attempt does not fit
BAD_ATTEMPTS, SHOWN = ("many", "'many'") if ON_SQLITE else (2**31 - 1, str(2**31 - 1))
sqlite_only = pytest.mark.skipif(not ON_SQLITE, reason="SQLite keeps any text in any column")


@pytest.fixture
def engine(settings, redis_server) -> Engine:  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    return get_engine()


def _raw(column: str, value: object, job_id: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE django_delayq_job SET %s = %%s WHERE id = %%s" % column,
                       [value, job_id])


def _backdate(*ids: str) -> None:
    """Rows changed and due an hour ago: past the reconciler's grace."""
    hour_ago = timezone.now() - timedelta(hours=1)
    Job.objects.filter(pk__in=ids).update(updated_at=hour_ago, run_at=hour_ago,
                                          created_at=hour_ago)


def _queued(engine: Engine, job_id: str) -> bool:
    [place] = engine.presence("default", [job_id])
    return place.queued


def _ended(job_id: str, reason: str) -> None:
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.last_error, row.error_type) == (JobStatus.DEAD, reason, INVALID_ROW)
    assert list(JobAttempt.objects.filter(job_id=job_id, outcome=JobStatus.DEAD)
                .values_list("number", "error")) == [(row.attempts, reason)]


def _ticks_until(r: Reconciler, done: Callable[[], bool]) -> None:
    def tick() -> bool:
        r.tick()  # raises nothing: one row never stops a tick
        return done()

    wait_until(tick, timeout=20)


def test_a_bad_count_ends_dead_alone_and_the_other_job_is_put_back(engine, caplog) -> None:  # type: ignore[no-untyped-def]
    """The count is read for each put-back (a worker active since went silent: the job
    may have run unrecorded, its next attempt is counted + 1)."""
    caplog.set_level(logging.WARNING, logger="django_delayq")
    x, w = schedule("tests.jobs.noop").id, schedule("tests.jobs.noop").id
    engine.purge("default")  # neither in Redis: the outbox
    _backdate(x, w)
    engine.client.zadd("{%s}:workers" % get_settings().prefix,
                       {"gone:1": engine.time_ms() - 3_600_000 + 5_000})
    _raw("attempts", BAD_ATTEMPTS, x)
    r = Reconciler(engine, get_settings(), ("default",))
    _ticks_until(r, lambda: _queued(engine, w) and Job.objects.get(pk=x).status == "dead")
    reason = "invalid row: attempts is %s, not a count from 0 to %d" % (SHOWN, 2**31 - 2)
    _ended(x, reason)
    assert Job.objects.get(pk=x).attempts == 1  # one more than its recorded attempts
    assert not _queued(engine, x)
    assert Job.objects.get(pk=w).status == JobStatus.SCHEDULED
    assert any(reason in rec.getMessage() and x in rec.getMessage() for rec in caplog.records)


@sqlite_only
def test_a_settled_job_whose_row_holds_text_attempts(engine) -> None:  # type: ignore[no-untyped-def]
    """The audit's case: X ran, Redis recorded it settled (its worker silent since), its
    row still says scheduled, with text in attempts; W is in the outbox."""
    w = schedule("tests.jobs.noop").id
    engine.purge("default")
    x = schedule("tests.jobs.noop").id
    [job] = engine.claim("default", 1, 60_000).jobs
    assert engine.ack("default", [(job.id, job.token)], holder="gone:2") == [True]
    _backdate(x, w)
    _raw("attempts", "many", x)
    r = Reconciler(engine, get_settings(), ("default",))
    _ticks_until(r, lambda: _queued(engine, w) and Job.objects.get(pk=x).status == "dead")
    _ended(x, "invalid row: attempts is 'many', not a count from 0 to %d" % (2**31 - 2))


@sqlite_only
@pytest.mark.parametrize(("column", "value", "reason"), [
    ("run_at", "not a time", "run_at is None, not a date and time"),
    ("priority", "high", "priority is 'high', not an integer from -100 to 100"),
    ("worker_id", b"\xff", "worker_id is b'\\xff', not text"),
])
def test_other_bad_values_on_a_running_row_of_a_silent_worker(  # type: ignore[no-untyped-def]
        engine, column, value, reason) -> None:
    """The running rows of silent workers (looked at every lease) and their second look."""
    x, w = schedule("tests.jobs.noop").id, schedule("tests.jobs.noop").id
    engine.purge("default")
    _backdate(x, w)
    Job.objects.filter(pk=x).update(status=JobStatus.RUNNING, attempts=1, worker_id="gone:3")
    _raw(column, value, x)
    r = Reconciler(engine, get_settings(), ("default",))
    _ticks_until(r, lambda: _queued(engine, w) and Job.objects.get(pk=x).status == "dead")
    _ended(x, "invalid row: " + reason)
    assert Job.objects.get(pk=x).attempts == 2


def test_a_dry_run_names_the_bad_row_and_writes_nothing(engine) -> None:  # type: ignore[no-untyped-def]
    x = schedule("tests.jobs.noop").id
    engine.purge("default")
    _backdate(x)
    _raw("attempts", BAD_ATTEMPTS, x)
    r = Reconciler(engine, get_settings(), ("default",))
    r.run_all(grace_seconds=0, dry_run=True)
    assert r.stats.to_settle == [x]
    assert Job.objects.get(pk=x).status == JobStatus.SCHEDULED


def test_a_due_time_the_driver_cannot_read_ends_dead_alone(engine) -> None:  # type: ignore[no-untyped-def]
    """A value the column holds but Python cannot (a month 13 on SQLite; PostgreSQL's
    'infinity', past year 9999): the query of the whole batch failed with it."""
    x, w = schedule("tests.jobs.noop").id, schedule("tests.jobs.noop").id
    engine.purge("default")
    _backdate(x, w)
    _raw("run_at", "2026-13-45 00:00:00" if ON_SQLITE else "infinity", x)
    r = Reconciler(engine, get_settings(), ("default",))
    _ticks_until(r, lambda: _queued(engine, w) and Job.objects.filter(
        pk=x, status=JobStatus.DEAD).exists())
    [(reason, attempts)] = Job.objects.filter(pk=x).values_list("last_error", "attempts")
    assert reason.startswith("invalid row: run_at cannot be read (") and attempts == 1, reason
    assert list(JobAttempt.objects.filter(job_id=x).values_list("number", "error")) == [
        (1, reason)]
