"""No input stops a worker thread, the audit writer or the loop.

From the side of whoever controls an input: a row edited into something the API would
refuse (a backoff no delay can come from, arguments nested 980 or 5,000 levels deep), a
job raising an error whose text no database can store, a job asking for a retry in 1e308
seconds, the database going away under a running worker. Each case runs a real worker
(a ``delayq_worker`` subprocess, or the ``Worker`` class on threads of this process) over
a real Redis and the test database. What must hold: the bad job ends with the reason on
its row, alone; every other job runs; the worker keeps its threads and stops cleanly.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection

from django_delayq import schedule
from django_delayq.core import payloads
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine import ClaimedJob
from django_delayq.engine.envelope import Envelope
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker import runner
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.loop import Worker, WorkerOptions
from django_delayq.worker.tracking import EXIT_OK
from tests import jobs_chaos
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def chaos_table() -> None:
    jobs_chaos.create_table()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM chaos_exec")


def row(job_id: str, *fields: str) -> tuple[Any, ...]:
    """Columns of a row without decoding its arguments (a forged row may be too deep for
    Django's own JSON decoding)."""
    return Job.objects.filter(pk=job_id).values_list(*fields).get()


def status(job_id: str) -> str:
    return str(row(job_id, "status")[0])


def forge(job_id: str, column: str, json_text: str) -> None:
    """Write ``json_text`` into a JSON column with SQL, as someone with database access
    could (the ORM would refuse or fail to encode it). On SQLite the column's JSON_VALID
    check, which also limits nesting, is switched off for the write."""
    table, qn = Job._meta.db_table, connection.ops.quote_name
    sqlite = connection.vendor == "sqlite"
    with connection.cursor() as cursor:
        if sqlite:
            cursor.execute("PRAGMA ignore_check_constraints = ON")
        try:
            cursor.execute("UPDATE %s SET %s = %%s%s WHERE %s = %%s"
                           % (qn(table), qn(column), "" if sqlite else "::jsonb", qn("id")),
                           [json_text, job_id])
        finally:
            if sqlite:
                cursor.execute("PRAGMA ignore_check_constraints = OFF")


def start_in_process(concurrency: int = 2) -> tuple[Worker, threading.Thread]:
    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("default",), concurrency=concurrency))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def stop(worker: Worker, thread: threading.Thread) -> None:
    worker.request_stop()
    thread.join(15)
    assert not thread.is_alive()


# -- a bad backoff, a bad retry delay: a real worker process on -c 2 ------------------

def test_bad_backoffs_and_retry_delays_end_their_jobs_and_the_worker_drains(  # type: ignore[no-untyped-def]
        cfg, chaos_table, start_worker) -> None:
    """Rows edited to hold a backoff ``schedule()`` refuses, and jobs that ask for a retry
    with a delay that is not one: each ends with its reason, the other jobs run on both
    threads, and SIGTERM drains with exit 0."""
    forged = {}
    for name, value in [("text", '"x"'), ("empty", "[]"), ("huge", "1e308"),
                        ("huge_step", "[1e308]"), ("factor", '{"factor": 1e308}')]:
        h = schedule("tests.jobs_chaos.always_raises", name, max_attempts=3)
        forge(h.id, "backoff", value)
        forged[name] = h
    nonsense = schedule("tests.jobs_chaos.retry_with", "soon", max_attempts=3)
    far = schedule("tests.jobs_chaos.retry_with", 1e308, max_attempts=3)
    normal = [schedule("tests.jobs_chaos.record", "normal-%d" % i) for i in range(4)]
    proc = start_worker("--concurrency", "2")
    wait_until(lambda: all(status(h.id) == JobStatus.DEAD for h in forged.values())
               and status(nonsense.id) == JobStatus.DEAD
               and status(far.id) == JobStatus.RETRYING
               and all(status(h.id) == JobStatus.SUCCEEDED for h in normal), timeout=30)
    for h in forged.values():
        error = row(h.id, "last_error")[0]
        assert error.startswith("invalid row: backoff"), error
        assert jobs_chaos.executions(h.id) == []  # refused before it ran
    error = row(nonsense.id, "last_error")[0]
    assert "cannot compute the retry delay" in error and "'soon'" in error
    assert row(far.id, "run_at")[0].year >= 2100  # capped at 100 years, not an overflow
    later = [schedule("tests.jobs_chaos.record", "later-%d" % i) for i in range(4)]
    wait_until(lambda: all(status(h.id) == JobStatus.SUCCEEDED for h in later), timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK


# -- text no database stores: lone surrogates, NUL ------------------------------------

def test_error_text_with_a_lone_surrogate_is_recorded_escaped(cfg, chaos_table) -> None:  # type: ignore[no-untyped-def]
    """``ValueError("bad \\ud800 input")`` used to kill the audit thread: the row is now
    written with the text escaped, and every later row is still written."""
    worker, thread = start_in_process()
    try:
        bad = schedule("tests.jobs_chaos.raise_text", "bad \\ud800 input \\x00 end",
                       max_attempts=1)
        first = [schedule("tests.jobs_chaos.record", "a%d" % i) for i in range(5)]
        wait_until(lambda: status(bad.id) == JobStatus.DEAD
                   and all(status(h.id) == JobStatus.SUCCEEDED for h in first))
        kind, error, trace = row(bad.id, "error_type", "last_error", "traceback")
        assert (kind, error) == ("builtins.ValueError", "bad \\ud800 input \\x00 end")
        assert "bad \\ud800 input" in trace
        [attempt] = JobAttempt.objects.filter(job_id=bad.id)
        assert "bad \\ud800 input" in attempt.error
        assert worker.audit._thread is not None and worker.audit._thread.is_alive()
        later = [schedule("tests.jobs_chaos.record", "b%d" % i) for i in range(5)]
        wait_until(lambda: all(status(h.id) == JobStatus.SUCCEEDED for h in later))
    finally:
        stop(worker, thread)


# -- one deep row in a claim batch ----------------------------------------------------

@pytest.mark.parametrize("depth", [980, 5000])
def test_deep_row_ends_dead_alone_and_its_batch_runs(cfg, chaos_table, depth) -> None:  # type: ignore[no-untyped-def]
    """A row whose arguments nest ``depth`` levels (the API refuses more than 100): read
    with the five healthy jobs of its claim batch, it ends dead with the reason; the
    healthy jobs run at their first attempt (no lease expires)."""
    healthy = [schedule("tests.jobs_chaos.record", "h%d" % i) for i in range(3)]
    bad = schedule("tests.jobs_chaos.record", "bad")
    healthy += [schedule("tests.jobs_chaos.record", "h%d" % i) for i in range(3, 5)]
    forge(bad.id, "args", "[" * depth + "]" * depth)
    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("default",), concurrency=2, burst=True))
    assert worker.run() == EXIT_OK
    assert [status(h.id) for h in healthy] == [JobStatus.SUCCEEDED] * 5
    assert [row(h.id, "attempts")[0] for h in healthy] == [1] * 5
    assert status(bad.id) == JobStatus.DEAD and jobs_chaos.executions(bad.id) == []
    error = row(bad.id, "last_error")[0]
    assert error == "invalid row: args is nested more than 100 levels deep"
    assert list(JobAttempt.objects.filter(job_id=bad.id).values_list("outcome", "error")) == [
        (JobStatus.DEAD, error)]
    assert not JobAttempt.objects.filter(error__startswith="lease expired").exists()


def test_payloads_read_survives_any_row(cfg) -> None:  # type: ignore[no-untyped-def]
    """Each row is parsed on its own: 10,000 levels of lists, 3,000 of dicts, wrong types."""
    forged = {"01DEEPDEEPDEEPDEEPDEEPDEEP": ("args", "[" * 10_000 + "]" * 10_000),
              "01DEEPOBJECTDEEPOBJECTDEEP": ("kwargs", '{"a":' * 3000 + "1" + "}" * 3000),
              "01NOTALISTNOTALISTNOTALIST": ("args", '"text"')}
    now = datetime.now(UTC)
    for job_id, (column, text) in forged.items():
        Job.objects.create(id=job_id, queue="default", callable_path="tests.jobs_chaos.record",
                           run_at=now, max_attempts=3)
        forge(job_id, column, text)
    good = schedule("tests.jobs_chaos.record", "good")
    claimed = [ClaimedJob(queue="default", id=i, due_ms=0, token=1, envelope="",
                          attempt=1)
               for i in [*forged, good.id]]
    loaded = payloads.read(claimed)
    assert [j.id for j in loaded.run] == [good.id] and not loaded.aside
    reasons = {b.job.id: b.reason for b in loaded.broken}
    assert "nested more than 100" in reasons["01DEEPDEEPDEEPDEEPDEEPDEEP"]
    assert "nested more than 100" in reasons["01DEEPOBJECTDEEPOBJECTDEEP"]
    assert "wrong types" in reasons["01NOTALISTNOTALISTNOTALIST"]
    assert len(reasons) == 3


def test_requeue_of_a_deep_row_is_an_invalid_job(cfg) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import InvalidJob
    from django_delayq.core.api import requeue

    h = schedule("tests.jobs_chaos.record", "x")
    Job.objects.filter(pk=h.id).update(status=JobStatus.SUCCEEDED)
    forge(h.id, "args", "[" * 980 + "]" * 980)
    with pytest.raises(InvalidJob, match="nested"):
        requeue(h.id)
    assert Job.objects.count() == 1


# -- the runner and the job threads never die -----------------------------------------

@pytest.mark.parametrize(("policy", "retry_delay"), [
    (1e308, None), ([1e308], None), ("x", None), ([], None), ({"factor": 1e308}, None),
    (None, "soon"), (None, object()), (None, float("nan"))])
def test_runner_never_raises_on_a_delay_it_cannot_compute(cfg, chaos_table, policy,  # type: ignore[no-untyped-def]
                                                           retry_delay) -> None:
    path, args = (("tests.jobs_chaos.always_raises", ["x"]) if retry_delay is None
                  else ("tests.jobs_chaos.retry_with", [retry_delay]))
    job = ClaimedJob(queue="default", id="01RUNNERRUNNERRUNNERRUNNER", due_ms=10**300,
                     token=1, envelope="", attempt=1,
                     payload=Envelope(path=path, args=args, max_attempts=3, backoff=policy))
    outcome = runner.run(job, worker_id="t", default_max_attempts=3, default_backoff=None)
    assert outcome.kind is runner.Kind.DEAD
    assert "not retried: cannot compute the retry delay" in outcome.error
    assert "Traceback" in outcome.traceback and "jobs_chaos" in outcome.traceback


def test_retry_delay_is_capped_at_a_hundred_years(cfg, chaos_table) -> None:  # type: ignore[no-untyped-def]
    job = ClaimedJob(queue="default", id="01RUNNERRUNNERRUNNERRUNNER", due_ms=0, token=1,
                     envelope="", attempt=1, payload=Envelope(path="tests.jobs_chaos.retry_with",
                                                   args=[1e308], max_attempts=3))
    outcome = runner.run(job, worker_id="t", default_max_attempts=3, default_backoff=None)
    assert outcome.kind is runner.Kind.RETRY
    assert outcome.retry_delay_ms == 100 * 365 * 24 * 3600 * 1000


def test_a_failure_around_an_attempt_ends_that_job_and_the_thread_lives(  # type: ignore[no-untyped-def]
        cfg, chaos_table, monkeypatch) -> None:
    """Whatever escapes ``runner.run`` (a bug of ours) becomes a dead outcome of that job;
    with one thread, the jobs after it still run."""
    real_run = runner.run
    bad = schedule("tests.jobs_chaos.record", "bad")

    def run(job: ClaimedJob, **kwargs: Any) -> runner.Outcome:
        if job.id == bad.id:
            raise RuntimeError("a bug in the worker")
        return real_run(job, **kwargs)

    monkeypatch.setattr(runner, "run", run)
    after = [schedule("tests.jobs_chaos.record", "after-%d" % i) for i in range(3)]
    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("default",), concurrency=1, burst=True))
    assert worker.run() == EXIT_OK
    assert status(bad.id) == JobStatus.DEAD
    assert row(bad.id, "error_type", "last_error") == ("builtins.RuntimeError",
                                                       "worker error: a bug in the worker")
    assert [status(h.id) for h in after] == [JobStatus.SUCCEEDED] * 3


# -- the audit writer -----------------------------------------------------------------

def test_audit_writer_drops_a_change_the_database_refuses_and_writes_the_rest(cfg) -> None:  # type: ignore[no-untyped-def]
    a, b, c = (schedule("tests.jobs.noop") for _ in range(3))
    writer = AuditWriter()
    writer.update(a.id, status=JobStatus.SUCCEEDED, attempts=1)
    writer.update(b.id, status=JobStatus.SUCCEEDED, attempts=2**70)  # no column holds it
    writer.update(c.id, status=JobStatus.DEAD, last_error="x\ud800\x00y")
    writer.attempt(job_id=c.id, number=1, outcome=JobStatus.DEAD, error="e\udfff")
    assert writer.flush() == 2
    assert (status(a.id), status(b.id), status(c.id)) == ("succeeded", "scheduled", "dead")
    assert row(c.id, "last_error")[0] == "x\\ud800\\x00y"
    assert JobAttempt.objects.get(job_id=c.id).error == "e\\udfff"
    assert writer.pending() == 0


def test_audit_writer_keeps_changes_through_an_outage(cfg, caplog) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop")
    writer = AuditWriter(flush_seconds=0.01)
    writer.start()
    table = Job._meta.db_table
    try:
        with connection.cursor() as cursor:
            cursor.execute('ALTER TABLE "%s" RENAME TO "%s_away"' % (table, table))
        try:
            writer.update(h.id, status=JobStatus.SUCCEEDED, attempts=1)
            wait_until(lambda: "audit flush failed" in caplog.text)
            wait_until(lambda: writer.pending() == 1)  # kept, not dropped
        finally:
            with connection.cursor() as cursor:
                cursor.execute('ALTER TABLE "%s_away" RENAME TO "%s"' % (table, table))
        wait_until(lambda: status(h.id) == JobStatus.SUCCEEDED)
        wait_until(lambda: "audit flush works again" in caplog.text)
        assert writer._thread is not None and writer._thread.is_alive()
    finally:
        writer.stop()


# -- the loop during a database outage ------------------------------------------------

def test_database_outage_logs_a_bounded_number_of_errors(cfg, chaos_table, caplog) -> None:  # type: ignore[no-untyped-def]
    """The table is gone for 3 s under a worker with due jobs: one ERROR with traceback,
    not one per loop turn, and a backoff that grows even though the Redis steps keep
    working; the jobs run once the table is back."""
    caplog.set_level(logging.INFO, logger="django_delayq")
    jobs = [schedule("tests.jobs_chaos.record", "j%d" % i) for i in range(3)]
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute('ALTER TABLE "%s" RENAME TO "%s_away"' % (table, table))
    worker, thread = start_in_process()
    try:
        try:
            wait_until(lambda: worker._outage.failures >= 1)
            threading.Event().wait(3.0)  # the period measured, not a synchronisation
            failures = worker._outage.failures
        finally:
            with connection.cursor() as cursor:
                cursor.execute('ALTER TABLE "%s_away" RENAME TO "%s"' % (table, table))
        wait_until(lambda: all(status(h.id) == JobStatus.SUCCEEDED for h in jobs))
        wait_until(lambda: "worker loop step works again" in caplog.text)
    finally:
        stop(worker, thread)
    errors = [r for r in caplog.records
              if r.levelno >= logging.ERROR and r.name.startswith("django_delayq")]
    # Bounded, not one per loop turn (it was ~75): one per failing part (the loop, the
    # reconciler, the audit writer). The loop's outage ends once: the jobs handed back are
    # due at once and every claim of them (the main loop's, the urgent timer's) holds the
    # hand-over lock, so no round finds them gone and counts as a recovery.
    assert 1 <= len(errors) <= 3, [r.getMessage()[:120] for r in errors]
    assert caplog.text.count("worker loop step works again") == 1
    assert errors[0].exc_info is not None  # the first one has the traceback
    assert failures <= 12  # 0.1, 0.2, 0.4 ... 5 s: about 6 in 3 s (it was ~75)


def test_job_delay_wakeups_do_not_cut_the_backoff_short(cfg, chaos_table) -> None:  # type: ignore[no-untyped-def]
    """Each failed claim hands its jobs back, which publishes a wake-up: the pause after a
    failure must not end on it, or the loop spins."""
    schedule("tests.jobs_chaos.record", "x")
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute('ALTER TABLE "%s" RENAME TO "%s_away"' % (table, table))
    worker, thread = start_in_process()
    try:
        t0 = time.monotonic()
        wait_until(lambda: worker._outage.failures >= 4)
        assert time.monotonic() - t0 >= 0.1 + 0.2 + 0.4 - 0.05  # three full pauses
    finally:
        with connection.cursor() as cursor:
            cursor.execute('ALTER TABLE "%s_away" RENAME TO "%s"' % (table, table))
        stop(worker, thread)
