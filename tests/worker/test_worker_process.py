"""The worker as a real process, with real signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from django_delayq import schedule
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus
from django_delayq.worker.tracking import EXIT_HARD_STOP, EXIT_OK
from tests.helpers import wait_until
from tests.worker.conftest import ROOT, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def runs(path) -> list[list[str]]:  # type: ignore[no-untyped-def]
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_burst_runs_due_jobs_and_exits(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    handles = [schedule("tests.jobs.record", str(out), "j%d" % i) for i in range(20)]
    later = schedule("tests.jobs.record", str(out), "later", delay=3600)
    proc = start_worker("--burst", "--concurrency", "4")
    assert proc.wait(60) == EXIT_OK
    assert sorted(r[0] for r in runs(out)) == sorted("j%d" % i for i in range(20))
    assert {h.status for h in handles} == {JobStatus.SUCCEEDED}
    assert later.status == JobStatus.SCHEDULED


def test_max_jobs_exits_after_that_many(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    for i in range(10):
        schedule("tests.jobs.record", str(out), "j%d" % i)
    proc = start_worker("--max-jobs", "4", "--concurrency", "1")
    assert proc.wait(60) == EXIT_OK
    assert len(runs(out)) == 4
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 4


def test_sigterm_drains_running_jobs_and_returns_unstarted(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    slow = [schedule("tests.jobs.sleep_then_record", str(out), "slow%d" % i, 1.5)
            for i in range(2)]
    queued = [schedule("tests.jobs.record", str(out), "q%d" % i) for i in range(6)]
    proc = start_worker("--concurrency", "2")
    wait_until(lambda: all(h.status == JobStatus.RUNNING for h in slow), timeout=20)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK
    assert sorted(r[0] for r in runs(out)) == ["slow0", "slow1"]  # running jobs finished
    assert {h.status for h in slow} == {JobStatus.SUCCEEDED}
    engine = get_engine()
    for h in queued:  # claimed-but-unstarted went back, attempt given back
        loc = engine.inspect("default", h.id)
        assert (loc.place, loc.attempts) == ("pending", 0), h.id
        assert h.status == JobStatus.SCHEDULED
    proc2 = start_worker("--burst")
    assert proc2.wait(60) == EXIT_OK
    assert len(runs(out)) == 8


def test_second_signal_stops_hard(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.sleep_then_record", str(out), "long", 30)
    proc = start_worker("--concurrency", "1")
    wait_until(lambda: h.status == JobStatus.RUNNING, timeout=20)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None  # draining: waits for the running job
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == EXIT_HARD_STOP
    assert runs(out) == []
    assert get_engine().inspect("default", h.id).place == "inflight"  # lease will expire


def test_sigkilled_worker_job_runs_again_after_lease(start_worker, delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "LEASE_SECONDS": 1.5}
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.sleep_then_record", str(out), "crashy", 2.0)
    victim = start_worker("--concurrency", "1")
    wait_until(lambda: h.status == JobStatus.RUNNING, timeout=20)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    survivor = start_worker("--concurrency", "1")
    wait_until(lambda: h.status == JobStatus.SUCCEEDED, timeout=30)
    row = h.job
    assert row.attempts == 2  # the lost delivery counted
    assert [r[0] for r in runs(out)] == ["crashy"]  # the killed run never finished
    assert row.attempt_history.get().error.startswith("lease expired")
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(20) == EXIT_OK


def test_worker_survives_redis_outage(start_worker, redis_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    proc = start_worker("--concurrency", "2")
    first = schedule("tests.jobs.record", str(out), "before")
    wait_until(lambda: first.status == JobStatus.SUCCEEDED, timeout=20)
    redis_server.stop()
    time.sleep(1.5)
    assert proc.poll() is None
    redis_server.start()  # same port, empty data: the prefix's keys are gone
    second = schedule("tests.jobs.record", str(out), "after")
    wait_until(lambda: second.status == JobStatus.SUCCEEDED, timeout=30)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == EXIT_OK


# The worker's signal handling as its own process: SIGTERM arrives while the main thread holds
# the lock of the loop's wake-up (as it does for a moment each round, clearing it or about to
# wait on it). A handler acting on the main thread would wait for that lock forever.
DRAIN_WHILE_HELD = """
import faulthandler, signal, time
import django
django.setup()
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.worker.loop import Worker, WorkerOptions
faulthandler.dump_traceback_later(20, exit=True)  # stuck: every thread's stack, then exit
worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",)))
worker.install_signal_handlers()
with worker.wake._cond:  # threading.Event's lock, as wake.clear() and wake.wait() hold it
    signal.raise_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    while not worker.draining and time.monotonic() < deadline:
        time.sleep(0.01)
print("draining", worker.draining, "woken", worker.wake.wait(15), flush=True)
"""


def test_sigterm_while_the_loop_holds_its_wake_up_lock_drains(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    proc = subprocess.run([sys.executable, "-c", DRAIN_WHILE_HELD], cwd=ROOT,
                          env=worker_env(delayq_settings), capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.split() == ["draining", "True", "woken", "True"], proc.stderr[-3000:]


def test_a_jobs_forked_children_signals_are_not_the_workers(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A child a job forks gets its default signal handlers back and not the worker's wakeup
    # socket: a SIGTERM to it ends it, and no longer drains (one) or stops (two) the worker.
    out = tmp_path / "runs.txt"
    proc = start_worker("--concurrency", "2")
    other = schedule("tests.jobs.sleep_then_record", str(out), "other", 3)
    wait_until(lambda: other.status == JobStatus.RUNNING, timeout=20)
    forking = schedule("tests.jobs.fork_and_terminate", 2)
    wait_until(lambda: forking.status == JobStatus.SUCCEEDED, timeout=60)
    assert forking.job.result == [-signal.SIGTERM, -signal.SIGTERM]
    # terminated right after the fork, before the child forgot the worker's relay
    at_once = schedule("tests.jobs.fork_and_terminate", 20, True)
    wait_until(lambda: at_once.status == JobStatus.SUCCEEDED, timeout=90)
    assert at_once.job.result == [-signal.SIGTERM] * 20
    later = schedule("tests.jobs.record", str(out), "later")  # a drained worker claims none
    wait_until(lambda: later.status == JobStatus.SUCCEEDED, timeout=30)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK
    assert sorted(r[0] for r in runs(out)) == ["later", "other"]


# Each worker, and each StopAsked, of a process uses its one relay: one thread, one socket pair.
RELAY_PER_PROCESS = """
import os, signal, threading
import django
django.setup()
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.worker.loop import StopAsked, Worker, WorkerOptions
from django_delayq.worker.signals_relay import signal_relay
def fds(): return len(os.listdir("/proc/self/fd"))
def make(): return Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",)))
make().install_signal_handlers()
before = fds()
for _ in range(5):
    make().install_signal_handlers(StopAsked(signal_relay()))
last = make()
last.install_signal_handlers()
signal.raise_signal(signal.SIGTERM)
print("threads", [t.name for t in threading.enumerate()].count("delayq-signals"),
      "fds", fds() - before, "draining", last.wake.wait(15) and last.draining, flush=True)
"""


def test_one_signal_relay_per_process(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    proc = subprocess.run([sys.executable, "-c", RELAY_PER_PROCESS], cwd=ROOT,
                          env=worker_env(delayq_settings), capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.split() == ["threads", "1", "fds", "0", "draining", "True"], (
        proc.stderr[-3000:])
