"""A queue's rate counts the starts the rows record, behind busy threads too.

The worker claims ahead of its free threads (prefetch, the urgent timer), and claim.lua
grants a rated queue's window at the claim. Jobs of a rated queue claimed while every
thread is busy waited there, then started together when a thread came free: six starts
of a 3/2s queue within milliseconds. A grant older than the worker's bound is renewed at
the start (lua/regrant.lua): refused, the job is handed back, due when the window has
room, uncharged; the rated queue is still claimed ahead, so another queue's backlog on
the same worker does not starve it."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.helpers import wait_until
from tests.worker.test_runtime_limits import most_in_window

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

RATE, WINDOW_S = 3, 2.0
RATED = 6


@pytest.fixture
def rated(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "QUEUE_OPTIONS": {"slow": {"rate_limit": "3/2s"}}}
    return delayq_settings


def _running(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def _stop(worker: Worker, thread: threading.Thread) -> None:
    worker.request_stop()
    thread.join(30)


def _succeeded(ids: list[str]) -> bool:
    return Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == len(ids)


def _starts(ids: list[str]) -> list[float]:
    rows = list(Job.objects.filter(pk__in=ids))
    assert len(rows) == len(ids) and all(r.attempts == 1 for r in rows)  # each once, uncharged
    started: list[datetime] = [r.started_at for r in rows if r.started_at is not None]
    assert len(started) == len(ids)
    return [t.timestamp() for t in started]


def test_jobs_claimed_behind_a_busy_thread_start_at_the_rate(rated, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = str(tmp_path / "runs.txt")
    blocker = schedule("tests.jobs.sleep_then_record", out, "blocker", 3.5).id
    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("default", "slow"), concurrency=1))
    thread = _running(worker)
    try:
        wait_until(lambda: Job.objects.filter(pk=blocker, status=JobStatus.RUNNING).exists(),
                   timeout=30)
        ids = [schedule("tests.jobs.record", out, "r%d" % i, queue="slow").id
               for i in range(RATED)]
        wait_until(lambda: _succeeded(ids + [blocker]), timeout=60, step=0.05)
    finally:
        _stop(worker, thread)
    starts = _starts(ids)
    assert most_in_window(starts, 1.5) <= RATE  # not six starts in a few ms
    assert most_in_window(starts, WINDOW_S - 0.1) <= RATE  # (the bound: 50 ms, and room)


def test_a_backlog_of_another_queue_does_not_starve_a_rated_queue(rated, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = str(tmp_path / "runs.txt")
    stop = threading.Event()

    def feed() -> None:  # a steady backlog of 5 ms jobs on "default"
        while not stop.is_set():
            for _ in range(20):
                schedule("tests.jobs.sleep_then_record", out, "b", 0.005)
            stop.wait(0.05)

    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("default", "slow"), concurrency=2))
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    thread = _running(worker)
    try:
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() >= 20,
                   timeout=30)
        t0 = time.time()
        ids = [schedule("tests.jobs.record", out, "r%d" % i, queue="slow").id
               for i in range(RATED)]
        wait_until(lambda: _succeeded(ids), timeout=30, step=0.05)
    finally:
        stop.set()
        feeder.join(10)
        _stop(worker, thread)
    starts = _starts(ids)
    assert most_in_window(starts, 1.5) <= RATE
    # two windows for six jobs at 3/2s: the last starts within a few seconds, not starved
    assert max(starts) - t0 < 2 * WINDOW_S + 4, max(starts) - t0
