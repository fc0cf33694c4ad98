"""Callable and queue limits with real workers: rates and concurrency measured by the
jobs themselves (their own start and end times), never by the worker's bookkeeping."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import Popen

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import burst, wait_until
from tests.worker import limits_settings
from tests.worker.conftest import wait_or_dump, worker_starter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


@pytest.fixture
def start_limited(delayq_settings, tmp_path) -> Iterator[Callable[..., Popen[str]]]:  # type: ignore[no-untyped-def]
    """`delayq_worker` subprocesses with tests/worker/limits_settings.py's CALLABLE_LIMITS."""
    yield from worker_starter(delayq_settings, tmp_path, "tests.worker.limits_settings")


def lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def started(start: Callable[..., Popen[str]], count: int, *args: str) -> list[Popen[str]]:
    """``count`` workers, once every one has registered (its signal handlers are set)."""
    procs = [start(*args) for _ in range(count)]
    engine = get_engine()
    wait_until(lambda: len(engine.workers()) == count, timeout=60, step=0.1)
    return procs


def stop(procs: list[Popen[str]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert wait_or_dump(proc, 60) == EXIT_OK


def most_in_window(starts: list[float], window_s: float) -> int:
    """The largest number of ``starts`` inside any half-open window of ``window_s``."""
    starts = sorted(starts)
    most, first = 0, 0
    for last, t in enumerate(starts):
        while t - starts[first] >= window_s:
            first += 1
        most = max(most, last - first + 1)
    return most


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of (start, end) spans open at one moment."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = running = 0
    for _, step in events:  # at equal times an end (-1) sorts before a start
        running += step
        most = max(most, running)
    return most


def test_a_callable_rate_limit_holds_across_four_worker_processes(start_limited, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "starts.txt"
    jobs = 200
    procs = started(start_limited, 4, "--concurrency", "4")
    due = timezone.now()  # all due at once, however long scheduling takes on a busy machine
    handles = [schedule("tests.jobs_more.stamp", str(out), "s%d" % i, at=due)
               for i in range(jobs)]
    wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == jobs,
               timeout=180, step=0.5)
    stop(procs)
    runs = lines(out)
    assert sorted(tag for tag, _, _ in runs) == sorted("s%d" % i for i in range(jobs))  # once
    assert len({pid for _, _, pid in runs}) > 1  # the workers shared the work
    # The starts Redis granted, as the rows record them (the function's own first line
    # follows by its thread's delay: on a busy machine a start granted at the end of one
    # window can run in the next)
    rows = Job.objects.filter(pk__in=[h.id for h in handles])
    starts = [t.timestamp() for t in rows.values_list("started_at", flat=True)]
    # A row's start is stamped by the thread after Redis granted it, late by up to d: the
    # stamps inside any window of 1 - d come from grants inside a window of 1 s. d = 0.25
    # leaves room for a busy machine; twice the rate would still show (30 in 0.75 s).
    assert most_in_window(starts, 0.75) <= limits_settings.RATE
    # Refused starts were deferred, not charged: one attempt each, and the row's lateness
    # counts from the time the job was first due (all were due at once).
    assert set(rows.values_list("attempts", flat=True)) == {1}
    last = rows.order_by("-started_at").first()
    assert last is not None and last.lateness_ms() is not None
    assert last.lateness_ms() >= (jobs - limits_settings.RATE) / limits_settings.RATE * 1000 * 0.9


def test_a_callable_concurrency_limit_holds_across_worker_processes(start_limited, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "spans.txt"
    jobs = 8
    procs = started(start_limited, 2, "--concurrency", "4")
    for i in range(jobs):
        schedule("tests.jobs_more.hold", str(out), "h%d" % i, 1.0)
    wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == jobs,
               timeout=120, step=0.2)
    stop(procs)
    spans = [(float(start), float(end)) for _, start, end in lines(out)]
    assert len(spans) == jobs
    # 8 threads were free; the limit let exactly CONCURRENCY run together
    assert most_at_once(spans) == limits_settings.CONCURRENCY
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    engine = get_engine()
    state = engine.limit_state("tests.jobs_more.hold", rate=None,
                               concurrency=limits_settings.CONCURRENCY)
    assert state.running == 0  # every slot was freed after its attempt was settled


def test_a_queue_concurrency_limit_holds_while_other_queues_are_served(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "QUEUE_OPTIONS": {"slow": {"concurrency": 1}}}
    slow, fast = tmp_path / "slow.txt", tmp_path / "fast.txt"
    for i in range(3):
        schedule("tests.jobs_more.hold", str(slow), "slow%d" % i, 0.5, queue="slow")
    for i in range(3):
        schedule("tests.jobs_more.stamp", str(fast), "fast%d" % i)
    assert burst(("slow", "default"), concurrency=4) == EXIT_OK
    spans = [(float(start), float(end)) for _, start, end in lines(slow)]
    assert len(spans) == 3 and most_at_once(spans) == 1
    # the queue blocked by its limit did not hold up the other one
    fast_starts = [float(t) for _, t, _ in lines(fast)]
    assert len(fast_starts) == 3 and max(fast_starts) < sorted(s for s, _ in spans)[1]
    limit = get_engine().queue_limit("slow")
    assert limit is not None and limit.concurrency == 1 and limit.rate is None
    assert get_engine().queue_limit("default") is None  # written at start-up: no limit


def test_a_timed_out_function_keeps_its_slot_until_it_returns(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The soft time limit fails the attempt, but its function still runs: the callable's
    concurrency slot stays taken until it returns."""
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "CALLABLE_LIMITS": {
        "tests.jobs_more.hold": {"concurrency": 1}}}
    out = tmp_path / "spans.txt"
    worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",),
                                                                concurrency=2))
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        first = schedule("tests.jobs_more.hold", str(out), "first", 2.0, timeout=0.3,
                         max_attempts=1)
        wait_until(lambda: first.status == JobStatus.RUNNING, timeout=20)
        second = schedule("tests.jobs_more.hold", str(out), "second", 0.1)
        wait_until(lambda: first.status == JobStatus.DEAD, timeout=20)  # timed out
        assert first.job.error_type == "django_delayq.exceptions.JobTimeout"
        wait_until(lambda: second.status == JobStatus.SUCCEEDED, timeout=30)
    finally:
        worker.request_stop()
        thread.join(30)
    assert second.job.attempts == 1  # its refusals were not charged
    spans = {tag: (float(start), float(end)) for tag, start, end in lines(out)}
    assert spans["second"][0] >= spans["first"][1]  # it waited for the function to return


def test_a_burst_waits_for_the_jobs_a_callable_limit_deferred(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "CALLABLE_LIMITS": {
        "tests.jobs_more.stamp": {"rate_limit": "2/s"}}}
    out = tmp_path / "starts.txt"
    for i in range(5):
        schedule("tests.jobs_more.stamp", str(out), "s%d" % i)
    assert burst(concurrency=4) == EXIT_OK
    starts = [float(t) for _, t, _ in lines(out)]
    assert len(starts) == 5 and most_in_window(starts, 1.0) <= 2


def test_a_job_waiting_for_its_callable_costs_its_queue_no_rate_and_backs_off(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A job its callable's concurrency refuses goes back uncharged: its claims leave the
    queue's rate window (the queue's other jobs start on time), and it is claimed again
    after a growing back-off while the slot stays taken, not every 50 ms."""
    delayq_settings.DELAYQ = {
        **delayq_settings.DELAYQ,
        "QUEUE_OPTIONS": {"default": {"rate_limit": "10/m", "concurrency": 5}},
        "CALLABLE_LIMITS": {"tests.jobs_more.hold": {"concurrency": 1}}}
    out, fast = tmp_path / "spans.txt", tmp_path / "fast.txt"
    engine = get_engine()
    worker = Worker(engine, get_settings(), WorkerOptions(queues=("default",),
                                                          concurrency=4))
    thread = threading.Thread(target=worker.run)
    thread.start()
    claims: list[int] = [0]  # the waiting job's lease token: its claims so far

    def claimed() -> int:  # read on each poll: the last token is gone once it succeeds
        token = engine.client.hget(engine.keys("default").attempts, waiter.id)
        claims[0] = max(claims[0], int(token or 0))
        return claims[0]

    try:
        first = schedule("tests.jobs_more.hold", str(out), "first", 4.0)
        wait_until(lambda: first.status == JobStatus.RUNNING, timeout=20)
        waiter = schedule("tests.jobs_more.hold", str(out), "waiter", 0.1)
        wait_until(lambda: claimed() >= 3, timeout=20)  # refused twice, waiting
        others = [schedule("tests.jobs_more.stamp", str(fast), "ok%d" % i) for i in range(3)]
        # the rate budget (10/m) is the queue's: its other jobs start while the waiter waits
        # (refused claims counted, the window fills within a second and they wait ~60 s)
        wait_until(lambda: all(h.status == JobStatus.SUCCEEDED for h in others), timeout=20)
        wait_until(lambda: claimed() >= 0 and waiter.status == JobStatus.SUCCEEDED,
                   timeout=30)
    finally:
        worker.request_stop()
        thread.join(30)
    assert waiter.job.attempts == 1  # its refusals were not charged
    spans = {tag: (float(start), float(end)) for tag, start, end in lines(out)}
    assert spans["waiter"][0] >= spans["first"][1]
    # ~4 s refused: about 8 claims with the back-off (50 ms ... 1 s), 40 and more without
    assert claims[0] <= 16, claims[0]
    # the window logs the claims of the jobs that started, and no refused one
    assert engine.client.zcard(engine.keys("default").starts) == 5
