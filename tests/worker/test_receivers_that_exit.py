"""A signal receiver that raises ``SystemExit`` (``sys.exit()`` in a receiver) is logged
like one that raises an exception, and affects neither its job nor the worker (docs/signals.md): a real worker's threads (``delayq-exec-N`` sends
``job_started``, ``delayq-acks`` / ``delayq-settle`` the ends) go on with the next jobs."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.dispatch import Signal

from django_delayq import schedule, signals
from django_delayq.models import Job, JobAttempt
from django_delayq.testing import run_worker
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import wait_until
from tests.worker.conftest import LOGS, wait_or_dump, worker_starter

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def exiting(delayq_settings) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """``connect(signal, error)``: a receiver of ``signal`` that raises ``error`` at each
    call; returns the job ids it was called for."""
    connected: list[tuple[Signal, Any]] = []

    def connect(signal: Signal, error: BaseException) -> list[str]:
        calls: list[str] = []

        def receiver(job_id: str, **kwargs: Any) -> None:
            calls.append(job_id)
            raise error

        signal.connect(receiver, weak=False)
        connected.append((signal, receiver))
        return calls

    yield connect
    for sig, receiver in connected:
        sig.disconnect(receiver)


def _burst(concurrency: int) -> None:
    """A burst worker, run on a thread of this test: it must end (not hang on a dead
    thread's jobs) well within the bound."""
    done = threading.Event()

    def run() -> None:
        run_worker(concurrency=concurrency)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(60), "the worker never ended its burst"


@pytest.mark.parametrize("error", [SystemExit(3), SystemExit("bye")], ids=["code", "text"])
def test_a_receiver_exiting_on_job_succeeded_affects_no_job(exiting, error, caplog):
    calls = exiting(signals.job_succeeded, error)
    ids = [schedule("tests.jobs.add", i, 1).id for i in range(5)]
    with caplog.at_level(logging.ERROR, logger="django_delayq.signals"):
        _burst(concurrency=1)
    rows = {row.pk: (row.status, row.result) for row in Job.objects.all()}
    assert rows == {job_id: ("succeeded", i + 1) for i, job_id in enumerate(ids)}
    assert sorted(calls) == sorted(ids)  # each job's receiver called: the thread lived on
    failed = [r for r in caplog.records if r.name == "django_delayq.signals"]
    assert len(failed) == 5 and all(r.levelno == logging.ERROR and r.exc_info for r in failed)


def test_a_receiver_exiting_on_job_started_affects_no_job(exiting, caplog):
    calls = exiting(signals.job_started, SystemExit(0))
    ids = [schedule("tests.jobs.add", i, 1).id for i in range(4)]
    with caplog.at_level(logging.ERROR, logger="django_delayq.signals"):
        _burst(concurrency=2)
    assert dict(Job.objects.values_list("pk", "status")) == dict.fromkeys(ids, "succeeded")
    assert sorted(calls) == sorted(ids)
    assert sum(r.name == "django_delayq.signals" for r in caplog.records) == 4


def test_keyboard_interrupt_in_a_receiver_is_not_swallowed(exiting):
    """Ctrl-C in a receiver (``schedule()`` from a shell) still interrupts."""
    exiting(signals.job_scheduled, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        schedule("tests.jobs.add", 1, 1)


class _ExitOn(logging.Handler):
    """A project's log handler that raises ``SystemExit`` on the job lines it is given
    (``needle`` in the line): called by the worker's threads as they log."""

    def __init__(self, needle: str) -> None:
        super().__init__()
        self.needle = needle

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            raise SystemExit(1)


@pytest.mark.parametrize("needle", ["started", "succeeded in", "retry at"])
def test_a_base_exception_from_the_projects_code_kills_no_worker_thread(
        delayq_settings, needle, caplog):  # type: ignore[no-untyped-def]
    """Beyond receivers, the worker's threads call a project's code in its log handlers:
    a ``BaseException`` there is logged, and the thread takes the next jobs. A job whose
    start line raised ends dead (its attempt failed in the worker); one whose success line
    raised stays succeeded, one whose retry line raised is retried (its row written first)."""
    joblog = logging.getLogger("django_delayq.worker.joblog")
    handler, level = _ExitOn(needle), joblog.level
    joblog.addHandler(handler)
    joblog.setLevel(logging.INFO)
    try:
        ids = [schedule("tests.jobs.boom", max_attempts=2, backoff=[0]).id
               if needle == "retry at" else schedule("tests.jobs.add", i, 1).id
               for i in range(4)]
        _burst(concurrency=2)
    finally:
        joblog.removeHandler(handler)
        joblog.setLevel(level)
    final = "succeeded" if needle == "succeeded in" else "dead"  # a retry: ran twice
    assert dict(Job.objects.values_list("pk", "status")) == dict.fromkeys(ids, final)
    if needle == "retry at":  # each first attempt's row written (its retry's start read it)
        assert dict(JobAttempt.objects.values_list("job_id", "number").filter(
            outcome="retrying")) == dict.fromkeys(ids, 1)
    assert any(r.levelno == logging.ERROR and r.exc_info and r.exc_info[0] is SystemExit
               for r in caplog.records)


@pytest.fixture
def start_exiting(delayq_settings, tmp_path) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """start(*args) -> a ``delayq_worker`` whose receivers call ``sys.exit()``; SIGKILLed
    after the test if still running."""
    yield from worker_starter(delayq_settings, tmp_path, "tests.worker.exiting_receivers_settings")


@pytest.mark.worker
def test_a_worker_process_whose_receivers_exit_runs_every_job_and_drains(start_exiting):
    """``delayq_worker`` with receivers of ``job_started`` and ``job_succeeded`` that call
    ``sys.exit()``: every job runs and is recorded, and SIGTERM drains it (exit 0)."""
    ids = [schedule("tests.jobs.add", i, 1).id for i in range(5)]
    proc = start_exiting("--concurrency", "2")
    wait_until(lambda: Job.objects.filter(pk__in=ids, status="succeeded").count() == 5,
               timeout=60)
    proc.send_signal(signal.SIGTERM)
    assert wait_or_dump(proc, 60) == EXIT_OK
    log = LOGS[proc.pid].read_text(errors="replace")
    assert log.count("signal receiver") >= 10, log[-4000:]  # 5 started, 5 succeeded
