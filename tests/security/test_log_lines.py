"""The worker's and the reconciler's log lines cannot be forged by what they show.

From the side of whoever controls a job's error text or a row in the database: an error
with a line break, an escape sequence and a NUL, an id copied into the database with the
same. What must hold: each value reaches the log as its Python escape (``\\n``,
``\\x1b``, ``\\u202e``), one log record per line; a row whose id can never be enqueued
ends ``dead`` with the reason on its row, alone, and the rest of its batch runs. A
traceback is the project's formatter's to write: its ``formatException`` is used.
"""

from __future__ import annotations

import logging
import signal

import pytest

from django_delayq import schedule, signals
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from django_delayq.worker.tracking import EXIT_OK
from tests import jobs_chaos
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FORGED = "INFO django_delayq.worker.joblog: job FAKE succeeded"
EVIL_ID = "ev\nINFO fake\x1b[31m\u202e"


@pytest.fixture
def chaos_table() -> None:
    jobs_chaos.create_table()


def status(job_id: str) -> str:
    return str(Job.objects.filter(pk=job_id).values_list("status", flat=True).get())


def test_a_dead_job_s_error_text_cannot_forge_a_line(cfg, chaos_table, start_worker,  # type: ignore[no-untyped-def]
                                                     tmp_path) -> None:
    """A real worker process: the ERROR line of a job dead after its attempts shows its
    error escaped; no forged line, no escape sequence, no NUL reaches the log."""
    bad = schedule("tests.jobs_chaos.raise_text",
                   "line1\\n%s\\x1b[31m \\x00 end" % FORGED, max_attempts=2, backoff=[0.1])
    good = [schedule("tests.jobs_chaos.record", "ok-%d" % i) for i in range(3)]
    proc = start_worker("--concurrency", "2")
    wait_until(lambda: status(bad.id) == JobStatus.DEAD
               and all(status(h.id) == JobStatus.SUCCEEDED for h in good), timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK
    log = (tmp_path / "worker-0.log").read_text("utf-8", "backslashreplace")
    assert "\x1b" not in log and "\x00" not in log
    dead = [line for line in log.splitlines() if "is dead after 2 attempt(s)" in line]
    assert len(dead) == 1, log
    assert dead[0].endswith(r"builtins.ValueError: line1\n%s\x1b[31m \x00 end" % FORGED)
    assert [line for line in log.splitlines() if "FAKE" in line] == dead


def _copy_row(job_id: str, new_id: str) -> None:
    """Copy ``job_id``'s row under ``new_id``, as someone with database access could."""
    row = Job.objects.get(pk=job_id)
    row.pk = new_id
    row.save(force_insert=True)


def test_a_row_whose_id_cannot_be_enqueued_ends_dead_and_its_batch_runs(  # type: ignore[no-untyped-def]
        cfg, chaos_table, caplog) -> None:
    """A row copied in the database under an id with control characters, Redis empty:
    the reconciler logs nothing raw, ends that row ``dead`` with the reason (row and
    attempt), and re-enqueues the rest of the batch, which a worker then runs."""
    caplog.set_level(logging.INFO, logger="django_delayq")
    engine = get_engine()
    good = [schedule("tests.jobs_chaos.record", "g%d" % i) for i in range(3)]
    _copy_row(good[0].id, EVIL_ID)
    engine.purge("default")  # Redis lost everything: the reconciler must put it back
    Reconciler(engine, get_settings(), ("default",)).run_all(assume_lost=True)
    for record in caplog.records:
        assert record.getMessage().isprintable(), record.getMessage()
    assert status(EVIL_ID) == JobStatus.DEAD
    error = Job.objects.filter(pk=EVIL_ID).values_list("last_error", flat=True).get()
    assert error == "invalid row: id has control characters: it cannot be enqueued"
    assert list(JobAttempt.objects.filter(job_id=EVIL_ID).values_list("outcome", "error")) \
        == [(JobStatus.DEAD, error)]
    assert engine.inspect("default", EVIL_ID).place == ""
    worker = Worker(engine, get_settings(),
                    WorkerOptions(queues=("default",), concurrency=2, burst=True))
    assert worker.run() == EXIT_OK
    assert [status(h.id) for h in good] == [JobStatus.SUCCEEDED] * 3
    assert status(EVIL_ID) == JobStatus.DEAD
    for record in caplog.records:
        assert record.getMessage().isprintable(), record.getMessage()


class _OneLine(logging.Formatter):
    """A log shipper's formatter: the traceback on one line, escaped."""

    def formatException(self, ei) -> str:  # type: ignore[no-untyped-def]
        return "ONE-LINE " + repr(super().formatException(ei))


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.kept: list[tuple[logging.LogRecord, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.kept.append((record, self.format(record)))


def test_a_traceback_is_written_by_the_project_s_formatter(cfg, chaos_table) -> None:  # type: ignore[no-untyped-def]
    """A ``job_succeeded`` receiver raising an error whose text holds a line break and an
    escape sequence, under a real worker: the ERROR line's traceback is the one the
    project's ``formatException`` writes (here on one line, escaped), the record's args
    hold the exception itself; the job and the next ones succeed."""
    def receiver(**kwargs: object) -> None:
        raise ValueError("boom\n%s\x1b[31m" % FORGED)

    handler = _Kept()
    handler.setFormatter(_OneLine("%(levelname)s %(name)s: %(message)s"))
    ours = logging.getLogger("django_delayq")
    ours.addHandler(handler)
    signals.job_succeeded.connect(receiver)
    try:
        handles = [schedule("tests.jobs_chaos.record", "t%d" % i) for i in range(2)]
        worker = Worker(get_engine(), get_settings(),
                        WorkerOptions(queues=("default",), concurrency=1, burst=True))
        assert worker.run() == EXIT_OK
    finally:
        signals.job_succeeded.disconnect(receiver)
        ours.removeHandler(handler)
    assert [status(h.id) for h in handles] == [JobStatus.SUCCEEDED] * 2
    failed = [(r, text) for r, text in handler.kept if "signal receiver" in r.msg]
    assert len(failed) == 2  # one per job
    for record, text in failed:
        assert isinstance(record.args, tuple) and isinstance(record.args[-1], ValueError)
        assert record.exc_info is not None and record.exc_info[1] is record.args[-1]
        trace = text.split("\nONE-LINE ", 1)[1]
        assert trace.startswith("'Traceback (most recent call last):\\n")
        assert "\n" not in trace and "\x1b" not in trace, trace
        assert trace.endswith("ValueError: boom\\n%s\\x1b[31m'" % FORGED), trace
