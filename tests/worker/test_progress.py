"""``report_progress()``: checked where it is called, throttled per job, the last value on
the row when the job ends; in worker threads, ``--processes`` children and async jobs."""

from __future__ import annotations

import gc
import math
import signal
from collections.abc import Iterator

import pytest
from django.db import connection

from django_delayq import report_progress, schedule
from django_delayq.core.progress import INTERVAL_SECONDS, Reporter
from django_delayq.exceptions import InvalidJob, NotInJob
from django_delayq.models import Job, JobStatus
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

TABLE = Job._meta.db_table


@pytest.fixture
def progress_writes() -> Iterator[None]:
    """A trigger that logs every UPDATE of ``Job.progress`` (whoever writes it) into the
    table ``progress_log``: the writes are counted by the database itself."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE progress_log (job_id varchar(64))")
        if connection.vendor == "sqlite":
            cursor.execute("CREATE TRIGGER progress_logged AFTER UPDATE OF progress ON %s "
                           "BEGIN INSERT INTO progress_log VALUES (NEW.id); END" % TABLE)
        else:
            cursor.execute("CREATE FUNCTION progress_logged() RETURNS trigger AS $$ BEGIN "
                           "INSERT INTO progress_log VALUES (NEW.id); RETURN NEW; END $$ "
                           "LANGUAGE plpgsql")
            cursor.execute("CREATE TRIGGER progress_logged AFTER UPDATE OF progress ON %s "
                           "FOR EACH ROW EXECUTE FUNCTION progress_logged()" % TABLE)
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER progress_logged" + (
            "" if connection.vendor == "sqlite" else " ON %s" % TABLE))
        if connection.vendor != "sqlite":
            cursor.execute("DROP FUNCTION progress_logged()")
        cursor.execute("DROP TABLE progress_log")


def writes_of(job_id: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM progress_log WHERE job_id = %s", [job_id])
        return int(cursor.fetchone()[0])


def test_real_worker_keeps_the_last_value_and_throttles_writes(  # type: ignore[no-untyped-def]
        start_worker, progress_writes) -> None:
    steps = schedule("tests.jobs.report_steps", 200)
    timed = schedule("tests.jobs.report_for", 1.2)
    assert start_worker("--burst", "--concurrency", "2").wait(120) == EXIT_OK
    row = Job.objects.get(pk=steps.id)
    assert (row.status, row.progress) == (JobStatus.SUCCEEDED, {"done": 200, "total": 200})
    row = Job.objects.get(pk=timed.id)
    assert row.status == JobStatus.SUCCEEDED
    reports, elapsed = row.result["reports"], row.result["elapsed"]
    assert row.progress == reports  # the last value reported
    # one write per interval from the first report to the last, plus the last value
    bound = math.floor(elapsed / INTERVAL_SECONDS) + 2
    assert 1 <= writes_of(timed.id) <= bound, (writes_of(timed.id), reports, elapsed)
    assert 1 <= writes_of(steps.id) <= 200


def test_progress_in_processes_children_and_async_jobs(start_worker) -> None:  # type: ignore[no-untyped-def]
    handles = [schedule("tests.jobs.report_steps", 30), schedule("tests.jobs.report_steps_async", 7)]
    proc = start_worker("--processes", "1", "--concurrency", "2")
    wait_until(lambda: all(h.status == JobStatus.SUCCEEDED for h in handles), timeout=120)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == EXIT_OK
    assert [Job.objects.get(pk=h.id).progress for h in handles] == [
        {"done": 30, "total": 30}, 7]


def test_a_bad_value_fails_the_job_naming_it(start_worker) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.report_bad_progress", max_attempts=1)
    assert start_worker("--burst").wait(120) == EXIT_OK
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.error_type) == (JobStatus.DEAD, "django_delayq.exceptions.InvalidJob")
    assert "progress['handle']" in row.last_error and "object" in row.last_error


def test_a_value_is_kept_as_it_was_reported_and_outlives_the_jobs_rollback(  # type: ignore[no-untyped-def]
        start_worker) -> None:
    """A throttled value is written at the end as it was when reported (the job grew the
    same dict past 4 KB with a non-JSON value afterwards); a value reported inside the
    job's own transaction is written on another connection: its rollback keeps it."""
    changed = schedule("tests.jobs.report_then_change", 10_000)
    rolled_back = schedule("tests.jobs.report_in_transaction")
    assert start_worker("--burst", "--concurrency", "2").wait(120) == EXIT_OK
    assert Job.objects.get(pk=changed.id).status == JobStatus.SUCCEEDED
    assert Job.objects.get(pk=changed.id).progress == {"step": 2}
    assert Job.objects.get(pk=rolled_back.id).progress == {"in": "transaction"}


@pytest.mark.parametrize(("value", "named"), [
    (object(), "object"),
    (float("nan"), "nan"),
    ({1: "one"}, "key 1"),
    ("x" * 5000, "bytes of JSON"),
    ("nul\x00", "NUL"),
    ("\udc80", "surrogate"),
])
def test_bad_values_raise_invalid_job_naming_them(value, named) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=named):
        report_progress(value)


def test_outside_a_job_it_says_so() -> None:
    with pytest.raises(NotInJob, match="no job runs here"):
        report_progress(0.5)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reporter_writes_once_per_interval_and_the_last_value_at_the_end() -> None:
    written: list[object] = []
    clock = Clock()
    reporter = Reporter("j", written.append, interval=0.5, clock=clock)
    for i in range(10):  # within one interval: the first written, the rest kept
        reporter.report(i)
    assert written == [0]
    clock.now += 0.5
    reporter.report(10)  # the interval passed: written at once
    reporter.report(11)
    assert written == [0, 10]
    reporter.finish()  # the last value, kept, written at the end
    reporter.finish()  # nothing more
    assert written == [0, 10, 11] and reporter.writes == 3


def test_a_reporter_leaves_no_cycle_for_the_garbage_collector() -> None:
    """One reporter a job: freed by its reference count when the job ends, so a drain of
    many jobs gives the cyclic collector nothing to do (it cost ~8 µs a job)."""
    gc.collect()
    reporters = [Reporter("job-%d" % i) for i in range(100)]
    del reporters
    assert gc.collect() < 50  # a cycle each: 500 (other threads' garbage may add a few)
