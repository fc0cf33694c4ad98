"""``delayq_worker --processes N``: the supervisor and its child worker processes, tested
as real processes with real signals.

Children that die are replaced and their jobs run; recycling after
``--max-jobs-per-child`` loses no job and runs none twice; the first SIGTERM drains,
the second stops hard; a supervisor that is killed leaves no child behind; the exit
codes; the registry info of the children.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from django_delayq import schedule
from django_delayq.core.connection import get_engine
from django_delayq.models import JobStatus
from django_delayq.worker.tracking import EXIT_CONFIG, EXIT_ERROR, EXIT_HARD_STOP, EXIT_OK
from tests.helpers import wait_until
from tests.worker.test_hard_time_limit import alive, children

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LEASE_LOST = "django_delayq.exceptions.LeaseLost"


def lines(path) -> list[list[str]]:  # type: ignore[no-untyped-def]
    """record()'s lines: tag, job id, attempt, pid."""
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_sigkilled_child_is_replaced_and_its_jobs_run(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    slow = schedule("tests.jobs.sleep_then_record", str(out), "slow", 3.0, backoff=[0])
    quick = [schedule("tests.jobs.record", str(out), "q%d" % i, delay=0.5) for i in range(5)]
    proc = start_worker("--processes", "1", "--concurrency", "1")
    wait_until(lambda: slow.status == JobStatus.RUNNING, timeout=30)
    (victim,) = children(proc.pid)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: slow.status == JobStatus.SUCCEEDED, timeout=60)
    wait_until(lambda: all(h.status == JobStatus.SUCCEEDED for h in quick), timeout=60)
    first = slow.job.attempt_history.get()
    assert (first.number, first.outcome, first.error_type) == (1, JobStatus.RETRYING, LEASE_LOST)
    assert "killed by SIGKILL" in first.error
    assert slow.job.attempts == 2
    assert sorted(r[0] for r in lines(out)) == sorted(["slow", *("q%d" % i for i in range(5))])
    assert all(h.job.attempts == 1 for h in quick)  # handed back, not charged
    (replacement,) = children(proc.pid)
    assert replacement != victim
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK


def test_recycling_after_max_jobs_per_child_loses_none_and_runs_none_twice(  # type: ignore[no-untyped-def]
        start_worker, tmp_path) -> None:
    out = tmp_path / "runs.txt"
    handles = [schedule("tests.jobs.record", str(out), "j%d" % i) for i in range(60)]
    proc = start_worker("--processes", "2", "--concurrency", "2", "--max-jobs-per-child", "7")
    wait_until(lambda: all(h.status == JobStatus.SUCCEEDED for h in handles), timeout=120)
    found = lines(out)
    assert sorted(r[0] for r in found) == sorted("j%d" % i for i in range(60))  # once each
    assert all(r[2] == "1" for r in found)  # first attempt each
    by_pid: dict[str, int] = {}
    for r in found:
        by_pid[r[3]] = by_pid.get(r[3], 0) + 1
    assert len(by_pid) >= 60 // 7 and max(by_pid.values()) <= 7
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK


def test_first_sigterm_drains_second_stops_hard(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.sleep_then_record", str(out), "long", 3600)
    proc = start_worker("--processes", "2", "--concurrency", "1")
    wait_until(lambda: h.status == JobStatus.RUNNING, timeout=30)
    wait_until(lambda: len(children(proc.pid)) == 2, timeout=30)
    kids = children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: len(children(proc.pid)) == 1, timeout=30)  # the idle one drained
    assert proc.poll() is None  # the busy one still runs its job
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_HARD_STOP
    assert not any(alive(pid) for pid in kids)
    assert lines(out) == []
    attempt = h.job.attempt_history.get()  # taken back at once, not after its lease
    assert (attempt.outcome, attempt.error_type) == (JobStatus.RETRYING, LEASE_LOST)


def test_drain_finishes_running_jobs_and_exits_ok(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    gate = tmp_path / "gate"  # the jobs run until it exists: both are running at the SIGTERM
    slow = [schedule("tests.jobs.report_then_wait", i, str(gate)) for i in range(2)]
    proc = start_worker("--processes", "2", "--concurrency", "2")
    wait_until(lambda: all(h.status == JobStatus.RUNNING for h in slow), timeout=90)
    kids = children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: all(h.status == JobStatus.RUNNING for h in slow), timeout=5)  # still
    gate.touch()
    assert proc.wait(60) == EXIT_OK
    assert {h.status for h in slow} == {JobStatus.SUCCEEDED}
    assert not any(alive(pid) for pid in kids)


def test_killed_supervisor_leaves_no_child_behind(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.sleep_then_record", str(out), "s", 1.0)
    proc = start_worker("--processes", "2", "--concurrency", "1")
    wait_until(lambda: h.status == JobStatus.RUNNING, timeout=30)
    wait_until(lambda: len(children(proc.pid)) == 2, timeout=30)
    kids = children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wait_until(lambda: not any(alive(pid) for pid in kids), timeout=30)  # they drained
    assert h.status == JobStatus.SUCCEEDED  # the running job finished first


def test_registry_info_names_supervisor_processes_and_running_jobs(  # type: ignore[no-untyped-def]
        start_worker, tmp_path) -> None:
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.sleep_then_record", str(out), "long", 3600)
    proc = start_worker("--processes", "2", "--concurrency", "1")
    wait_until(lambda: h.status == JobStatus.RUNNING, timeout=30)
    engine = get_engine()

    def infos() -> list[dict]:  # type: ignore[type-arg]
        return [json.loads(w.info) for w in engine.workers() if w.info]

    wait_until(lambda: len(infos()) == 2 and any(i["jobs"] for i in infos()), timeout=30)
    found = infos()
    assert len({i["supervisor"] for i in found}) == 1 and found[0]["supervisor"]
    assert {i["processes"] for i in found} == {2}
    assert {i["pid"] for i in found} == children(proc.pid)
    (job,) = [j for i in found for j in i["jobs"]]
    assert (job["id"], job["queue"], job["callable"]) == (
        h.id, "default", "tests.jobs.sleep_then_record")
    assert abs(job["started_ms"] - h.job.started_at.timestamp() * 1000) < 5000
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: len(children(proc.pid)) == 1, timeout=30)  # one signal at a time:
    proc.send_signal(signal.SIGTERM)  # two pending SIGTERMs are delivered as one
    assert proc.wait(30) == EXIT_HARD_STOP


@pytest.mark.parametrize("args", [
    ("--concurrency", "0"), ("--concurrency", "-2"), ("--processes", "0"),
    ("--processes", "many"), ("--max-jobs-per-child", "5"),
    ("--processes", "2", "--max-jobs", "5"), ("--processes", "2", "--max-jobs-per-child", "0"),
    ("--queues", "nope"), ("--metrics-port", "70000"), ("--metrics-port", "0"),
    ("--metrics-port", "-1"), ("--processes", "2", "--metrics-port", "65535"),
    ("--prefetch", "-1"),
])
def test_bad_options_exit_with_exit_config(start_worker, args) -> None:  # type: ignore[no-untyped-def]
    proc = start_worker(*args)
    assert proc.wait(60) == EXIT_CONFIG


@pytest.mark.parametrize("recycle", [(), ("--max-jobs-per-child", "4")])
def test_burst_with_processes_runs_due_jobs_and_exits(start_worker, tmp_path, recycle) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    handles = [schedule("tests.jobs.record", str(out), "b%d" % i) for i in range(30)]
    proc = start_worker("--processes", "2", "--burst", *recycle)
    assert proc.wait(120) == EXIT_OK
    assert {h.status for h in handles} == {JobStatus.SUCCEEDED}
    assert len(lines(out)) == 30


def test_recycling_over_max_memory_per_child_loses_none_and_runs_none_twice(  # type: ignore[no-untyped-def]
        start_worker, tmp_path) -> None:
    out = tmp_path / "runs.txt"
    handles = [schedule("tests.jobs.sleep_then_record", str(out), "m%d" % i, 0.3)
               for i in range(30)]
    # Every process is over 1 MB: each is told to drain once it has started a job.
    proc = start_worker("--processes", "2", "--concurrency", "2", "--max-memory-per-child", "1")
    wait_until(lambda: all(h.status == JobStatus.SUCCEEDED for h in handles), timeout=120)
    found = lines(out)
    assert sorted(r[0] for r in found) == sorted("m%d" % i for i in range(30))  # once each
    assert all(h.job.attempts == 1 for h in handles)
    assert len({r[3] for r in found}) >= 3  # recycled at least once
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK


def test_children_that_keep_dying_at_start_are_restarted_with_a_growing_delay(  # type: ignore[no-untyped-def]
        start_worker, tmp_path) -> None:
    proc = start_worker("--processes", "1", "--concurrency", "1")
    for _ in range(3):  # each dies within seconds of its start
        wait_until(lambda: len(children(proc.pid)) == 1, timeout=60)
        (child,) = children(proc.pid)
        os.kill(child, signal.SIGKILL)
        wait_until(lambda victim=child: victim not in children(proc.pid), timeout=30)
    wait_until(lambda: len(children(proc.pid)) == 1, timeout=60)
    log = (tmp_path / "worker-0.log").read_text()
    delays = [line.rsplit(" ", 1)[1] for line in log.splitlines()
              if "(killed by SIGKILL); a new one starts in" in line]
    assert delays == ["0.5s", "1.0s", "2.0s"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_OK


def test_a_child_whose_supervisor_died_before_it_asked_for_the_signal_stops(  # type: ignore[no-untyped-def]
        delayq_settings, tmp_path) -> None:
    """A child started just as its supervisor died (the kernel's death signal asked for
    too late) and finding no Redis does not wait for Redis forever: it exits."""
    import socket
    import subprocess
    import sys

    from tests.worker.conftest import ROOT, worker_env

    env = worker_env(delayq_settings)
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        env["DELAYQ_REDIS_URL"] = "redis://127.0.0.1:%d/0" % closed.getsockname()[1]
    ours, theirs = socket.socketpair()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # the "supervisor": a pid that is not the child's parent
    spec = "%d:1:%d:sup-gone" % (theirs.fileno(), gone.pid)
    with open(tmp_path / "child.log", "w") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "django", "delayq_worker", "--supervised", spec],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            pass_fds=(theirs.fileno(),))
    try:
        assert child.wait(60) == EXIT_ERROR
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        ours.close()
        theirs.close()
    assert "the supervisor is gone" in (tmp_path / "child.log").read_text()
