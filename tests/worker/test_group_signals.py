"""One signal sent to the whole process group of ``delayq_worker --processes N`` (Ctrl-C
in a terminal, systemd's ``KillMode=control-group``, a container runtime signalling every
process): each worker process gets the signal itself and the supervisor's ``drain`` word
too, in either order. That is one request: every process drains, each job runs once, the
exit code is 0. A second signal stops them all hard (3). A process that the signal ends
(still starting, or exiting already) held no running job: the supervisor counts it clean.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_delayq import schedule
from django_delayq.models import JobAttempt, JobStatus
from django_delayq.worker.tracking import EXIT_HARD_STOP, EXIT_OK
from tests.helpers import wait_until
from tests.worker.conftest import LOGS, ROOT, wait_or_dump, worker_env, worker_starter
from tests.worker.test_hard_time_limit import alive, children

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

SETTINGS = "tests.worker.signals_settings"  # INFO lines in the log: the tests wait on them
LEASE_LOST = "django_delayq.exceptions.LeaseLost"
ROUNDS = 2  # which of a process's signal and its supervisor's word comes first is a race
# Two processes of two threads, each taking two jobs, no more: the four jobs all run
# when the signal lands (else one process may hold two it has not started).
TWO_EACH = ("--processes", "2", "--concurrency", "2", "--max-jobs-per-child", "2")


@pytest.fixture
def start_group(delayq_settings, tmp_path) -> Iterator[Callable[..., subprocess.Popen[str]]]:  # type: ignore[no-untyped-def]
    """start(*args) -> ``delayq_worker *args``, each the leader of a process group."""
    yield from worker_starter(delayq_settings, tmp_path, SETTINGS, session=True)


def log_of(proc: subprocess.Popen[str]) -> str:
    return LOGS[proc.pid].read_text(errors="replace")


def tags(path: Path) -> list[tuple[str, str]]:
    """``tests.jobs.record``'s lines: (tag, attempt), one per run."""
    lines = path.read_text().splitlines() if path.exists() else []
    return sorted((f[0], f[2]) for f in (line.split() for line in lines))


def wait_acted_on(proc: subprocess.Popen[str]) -> None:
    """Until the supervisor and both its processes acted on a first group signal: signals
    go one at a time (two pending ones are delivered as one)."""
    def acted() -> bool:
        log = log_of(proc)
        return "supervisor: draining" in log and (
            log.count("draining already") + log.count("draining (a signal")) == 2
    wait_until(acted, timeout=60)


def gated_jobs(tmp_path: Path, name: str, spin: bool = False) -> tuple[list, Path, Path]:  # type: ignore[type-arg]
    """Four jobs (two per process: ``TWO_EACH``) that run until the gate file exists,
    then work 1.5 s more (``spin``: CPU-bound): (handles, gate, their runs' file)."""
    out, gate = tmp_path / ("%s.runs" % name), tmp_path / ("%s.gate" % name)
    handles = [schedule("tests.jobs.wait_then_work", str(out), "j%d" % i, str(gate), 1.5, spin)
               for i in range(4)]
    return handles, gate, out


@pytest.mark.parametrize("spin", [False, True], ids=["sleeping", "cpu-bound"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_one_group_signal_drains_every_process_and_runs_each_job_once(  # type: ignore[no-untyped-def]
        start_group, tmp_path, signum, spin) -> None:
    for n in range(ROUNDS):
        handles, gate, out = gated_jobs(tmp_path, "round%d" % n, spin)
        proc = start_group(*TWO_EACH)
        wait_until(lambda hs=handles: all(h.status == JobStatus.RUNNING for h in hs),
                   timeout=90)
        kids = children(proc.pid)
        os.killpg(proc.pid, signum)  # the supervisor and both processes
        gate.touch()  # the jobs end 1.5 s on: a hard stop would have cut them short
        assert wait_or_dump(proc, 90) == EXIT_OK, log_of(proc)[-6000:]
        assert not any(alive(pid) for pid in kids)
        assert {h.status for h in handles} == {JobStatus.SUCCEEDED}, log_of(proc)[-6000:]
        assert [h.job.attempts for h in handles] == [1, 1, 1, 1]
        assert not JobAttempt.objects.filter(job_id__in=[h.id for h in handles]).exists()
        assert tags(out) == [("j%d" % i, "1") for i in range(4)]  # each ran once
        log = log_of(proc)
        assert "hard stop" not in log and "Traceback" not in log


def test_a_second_group_signal_stops_every_process_hard(start_group, tmp_path) -> None:  # type: ignore[no-untyped-def]
    handles, _gate, out = gated_jobs(tmp_path, "hard")  # the gate never opens
    proc = start_group(*TWO_EACH)
    wait_until(lambda: all(h.status == JobStatus.RUNNING for h in handles), timeout=90)
    kids = children(proc.pid)
    os.killpg(proc.pid, signal.SIGTERM)
    wait_acted_on(proc)
    assert proc.poll() is None  # draining: the jobs run on
    os.killpg(proc.pid, signal.SIGTERM)
    assert wait_or_dump(proc, 60) == EXIT_HARD_STOP
    assert not any(alive(pid) for pid in kids)
    assert tags(out) == []
    for h in handles:  # taken back at once: the attempt failed as a lost lease
        attempt = h.job.attempt_history.get()
        assert (attempt.outcome, attempt.error_type) == (JobStatus.RETRYING, LEASE_LOST)


def test_a_process_stopped_hard_by_a_second_signal_of_its_own_makes_the_exit_code_3(  # type: ignore[no-untyped-def]
        start_group, tmp_path) -> None:
    handles, gate, out = gated_jobs(tmp_path, "one")
    proc = start_group(*TWO_EACH)
    wait_until(lambda: all(h.status == JobStatus.RUNNING for h in handles), timeout=90)
    os.killpg(proc.pid, signal.SIGTERM)
    wait_acted_on(proc)
    victim, other = sorted(children(proc.pid))
    os.kill(victim, signal.SIGTERM)  # its second: it stops hard, the other drains
    wait_until(lambda: not alive(victim), timeout=60)
    gate.touch()
    assert wait_or_dump(proc, 90) == EXIT_HARD_STOP, log_of(proc)[-6000:]
    assert not alive(other)
    assert sorted(h.status for h in handles) == [JobStatus.RETRYING] * 2 + [
        JobStatus.SUCCEEDED] * 2
    assert len(tags(out)) == 2


def ran_once_at_most(out: Path) -> None:
    runs = tags(out)
    assert len({tag for tag, _ in runs}) == len(runs) and {a for _, a in runs} <= {"1"}, runs


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_group_signal_while_the_processes_start_stops_them_cleanly(  # type: ignore[no-untyped-def]
        start_group, tmp_path, signum) -> None:
    """A process still loading Django dies by the signal (SIGINT: a ``KeyboardInterrupt``
    traceback in the log); it held no running job, so the supervisor counts it clean."""
    out = tmp_path / "start.runs"
    for i in range(4):
        schedule("tests.jobs.record", str(out), "j%d" % i)
    proc = start_group("--processes", "2", "--concurrency", "1")
    wait_until(lambda: len(children(proc.pid)) == 2, timeout=60)  # just started: Django,
    kids = children(proc.pid)  # its checks, the settings are ahead of them
    os.killpg(proc.pid, signum)
    assert wait_or_dump(proc, 60) == EXIT_OK, log_of(proc)[-6000:]
    assert not any(alive(pid) for pid in kids)
    ran_once_at_most(out)
    assert log_of(proc).count("ended during the stop") == 2, log_of(proc)[-6000:]


def test_a_group_signal_as_recycled_processes_exit_stops_them_cleanly(  # type: ignore[no-untyped-def]
        start_group, tmp_path) -> None:
    """``--max-jobs-per-child 1``: processes exit and start all the time; a group SIGTERM
    sent right after one logged its stop ends it during Python's shutdown (its handlers
    restored: -15), or one starting. Neither held a running job: exit 0."""
    for n in range(4):
        out = tmp_path / ("recycle%d.runs" % n)
        for i in range(30):
            schedule("tests.jobs.record", str(out), "j%d" % i)
        proc = start_group("--processes", "2", "--concurrency", "1",
                           "--max-jobs-per-child", "1")
        wait_until(lambda p=proc: log_of(p).count(" stopped (exit 0, 1 jobs claimed)") >= 1,
                   timeout=90, step=0.002)
        os.killpg(proc.pid, signal.SIGTERM)
        assert wait_or_dump(proc, 60) == EXIT_OK, log_of(proc)[-6000:]
        ran_once_at_most(out)


# A worker process and its supervisor's words, in a process of its own (a socket pair for
# the link): each case is the words and signals it gets, in that order, each acted on
# before the next, then the worker's run and its exit code.
ORDERS = """
import os, signal, socket, threading, time
import django
django.setup()
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.worker.loop import Worker, WorkerOptions, attach
from django_delayq.worker.signals_relay import signal_relay
from django_delayq.worker.tracking import Link, Supervision

fence = threading.Event()
kept = []  # the supervisor's ends: open, so no listener takes its supervisor for gone

def until(done):
    deadline = time.monotonic() + 15
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done()

def case(*steps):
    ours, theirs = socket.socketpair()
    kept.append(ours)
    supervision = Supervision(supervisor_id="sup-test", processes=2,
                              link=Link(theirs.detach()), parent_pid=os.getppid())
    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("default",), supervision=supervision))
    worker.install_signal_handlers()
    signal_relay().on(signal.SIGUSR1, fence.set)
    attach(worker, supervision)
    for step in steps:
        if step == "TERM":  # acted on once the relay has acted on the SIGUSR1 after it
            fence.clear()
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGUSR1)
            assert fence.wait(15)
        else:
            ours.sendall(step.encode() + b"\\n")
            if step == "drain" and not worker.draining:
                until(lambda: worker.draining)
            elif step == "stop":
                until(lambda: worker.hard_stop)
    return worker.run()

print("codes", case("drain", "TERM"), case("TERM", "drain"), case("drain", "TERM", "TERM"),
      case("drain", "stop"), case("TERM", "TERM"), flush=True)
"""


def test_the_supervisors_drain_and_the_processs_own_signal_are_one_request(  # type: ignore[no-untyped-def]
        delayq_settings) -> None:
    proc = subprocess.run([sys.executable, "-c", ORDERS], cwd=ROOT,
                          env=worker_env(delayq_settings), capture_output=True, text=True,
                          timeout=120)
    # drain then signal, signal then drain: drained; a second signal, or stop: hard
    assert proc.stdout.split() == ["codes", "0", "0", "3", "3", "3"], proc.stderr[-3000:]
