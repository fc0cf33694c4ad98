"""A worker stopped (SIGSTOP) past its leases, then continued (SIGCONT), after another
worker took its jobs back and ran them: nothing it held unstarted runs again, and the
late outcome of the job it was running is refused, never recorded as the job's.

Real ``delayq_worker`` subprocesses (``--worker-id w1`` stalls, ``w2`` takes over), the
test database, a private redis-server, leases of 2 s. Each job appends its completed run
(job id, attempt, pid) to a file (``jobs_chaos.mark_run``); the settings module below has
each worker append every ``job_succeeded`` it sends to another file. The last test checks
the helper that stops a worker (``_stall``): stopped, it holds no write lock of SQLite.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_delayq import JobSpec, schedule, schedule_many
from django_delayq.core.connection import get_engine
from django_delayq.exceptions import LeaseLost, type_path
from django_delayq.models import LIVE_STATUSES, Job, JobAttempt, JobStatus
from tests.helpers import point_at, wait_until
from tests.reliability.conftest import signals_module, stop
from tests.worker import conftest as worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LEASE = 2.0
MODULE = "delayq_stalled_settings"
# every job_succeeded a worker sends: "<job id> <attempt> <worker id>"
SETTINGS = """
import os

from django_delayq import signals as _signals
from tests.reliability.worker_settings import *  # noqa: F403


def _succeeded(sender, job_id, attempt, worker_id, **kwargs):
    with open(os.environ["DELAYQ_TEST_SIGNALS"], "a") as out:
        out.write("%s %d %s\\n" % (job_id, attempt, worker_id))


_signals.job_succeeded.connect(_succeeded, weak=False)
"""
# told a line on stdin: 0.3 s later, holds the write lock of the SQLite database argv[1]
# for a second
HOLDER = """
import sqlite3, sys, time

db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE IF NOT EXISTS t (x)")
print("ready", flush=True)
while sys.stdin.readline():
    time.sleep(0.3)
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO t VALUES (1)")
    time.sleep(1.0)
    db.execute("COMMIT")
"""


@pytest.fixture
def runs_dir(tmp_path: Path) -> str:
    path = tmp_path / "runs"
    path.mkdir()
    return str(path)


@pytest.fixture
def start(settings, redis_server, tmp_path,  # type: ignore[no-untyped-def]
          monkeypatch) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """start(name, *args): a ``delayq_worker --worker-id name`` whose successes go to the
    file ``signals``."""
    point_at(settings, redis_server, LEASE_SECONDS=LEASE)
    signals_module(tmp_path, monkeypatch, MODULE, SETTINGS)
    starter = worker.worker_starter(settings, tmp_path, MODULE)
    begin = next(starter)
    yield lambda name, *args: begin("--queues", "default", "--worker-id", name, *args)
    next(starter, None)  # SIGKILLs the survivors (a stopped one too)


def _signals(tmp_path: Path) -> list[tuple[str, int, str]]:
    lines = (tmp_path / "signals").read_text().split()
    return [(lines[i], int(lines[i + 1]), lines[i + 2]) for i in range(0, len(lines), 3)]


def _runs(runs_dir: str) -> dict[str, list[tuple[int, int]]]:
    """(attempt, pid) of each completed run, per job id."""
    path = Path(runs_dir) / "runs"
    out: dict[str, list[tuple[int, int]]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        job_id, attempt, pid = line.split()
        out.setdefault(job_id, []).append((int(attempt), int(pid)))
    return out


def _info(name: str) -> tuple[float, dict[str, Any]] | None:
    """The last heartbeat (Redis ms) and registry info of the worker ``name``."""
    for entry in get_engine().workers():
        if entry.id.startswith(name + ":") and entry.info:
            return entry.beat_ms, json.loads(entry.info)
    return None


def _log(proc: subprocess.Popen[str]) -> str:
    return worker.LOGS[proc.pid].read_text(errors="replace")


def _stall(proc: subprocess.Popen[str], database: str | None = None) -> None:
    """SIGSTOP ``proc`` at a moment it holds no transaction open: on the SQLite database
    ``database`` (None: the test database) no write lock, on PostgreSQL no transaction
    of another session of the test database. A process stopped inside one would hold
    off every other writer of its rows (a fault of its own, not the one under test: w2's
    take-back would wait on the row's lock for ever). Stopped in one, it is continued
    and stopped again."""
    if database is None and connection.vendor == "sqlite":
        database = str(connection.settings_dict["NAME"])
    for _ in range(100):
        os.kill(proc.pid, signal.SIGSTOP)
        _wait_stopped(proc)  # only then is the check below true for the whole stop
        if (_writable(database) if database is not None
                else connection.vendor != "postgresql" or not _others_in_transaction()):
            return
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.02)  # lets it end the transaction
    raise AssertionError("worker %d held the database at each stop" % proc.pid)


def _wait_stopped(proc: subprocess.Popen[str]) -> None:
    """Until every thread of ``proc`` has stopped. kill() returns before: one of its threads
    must be scheduled to act on the SIGSTOP, and on a loaded machine the others run on
    meanwhile; a transaction one of them begins then is held through the stop."""

    def stopped() -> bool:
        pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        if pid and not os.WIFSTOPPED(status):
            proc.returncode = os.waitstatus_to_exitcode(status)
            raise AssertionError("worker %d ended (exit %d) instead of stopping" % (
                proc.pid, proc.returncode))
        return bool(pid)

    wait_until(stopped, timeout=60, step=0.005)


def _writable(database: str) -> bool:
    db = sqlite3.connect(database, timeout=0.5)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.rollback()
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()


def _others_in_transaction() -> bool:
    """Whether a session of the test database other than this one is inside a
    transaction (PostgreSQL): only the workers connect to it besides this test."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname ="
                       " current_database() AND pid <> pg_backend_pid()"
                       " AND xact_start IS NOT NULL")
        return bool(cursor.fetchone()[0])


def _wait_logged(predicate: Callable[[], bool], *procs: subprocess.Popen[str]) -> None:
    """``wait_until(predicate)``; not met: the row and the workers' logs in the error."""
    try:
        wait_until(predicate, timeout=90, step=0.1)
    except AssertionError as exc:
        rows = list(Job.objects.values_list("id", "status", "attempts", "worker_id"))
        raise AssertionError("%s; rows %s; logs:\n%s" % (exc, rows, "\n".join(
            "-- %d:\n%s" % (p.pid, _log(p)[-6000:]) for p in procs))) from None


def _held(job_id: str) -> int:
    """The attempt of ``job_id`` a lease holds in Redis, 0 when none does."""
    found = get_engine().inspect("default", job_id)
    return found.attempts if found.place == "inflight" else 0


def _all_final() -> bool:
    return not Job.objects.filter(status__in=LIVE_STATUSES).exists()


def test_a_late_success_of_a_stalled_worker_is_refused_never_recorded(  # type: ignore[no-untyped-def]
        start, runs_dir, tmp_path) -> None:
    """w1 runs a 3 s job and is stopped; w2 takes the lease back (attempt 1 lost) and runs
    it as attempt 2; w1 continued finishes attempt 1 and acks it: refused (its lease is
    w2's settled delivery now), so neither its row, nor an attempt row, nor a second
    ``job_succeeded`` records attempt 1 as the job's success."""
    h = schedule("tests.jobs_chaos.slow_first", runs_dir, 3.0)
    w1 = start("w1", "--concurrency", "1")
    wait_until((Path(runs_dir) / "started").exists, timeout=60)
    _stall(w1)
    try:
        w2 = start("w2", "--concurrency", "1")
        _wait_logged(lambda: h.status == JobStatus.SUCCEEDED, w1, w2)
    finally:
        os.kill(w1.pid, signal.SIGCONT)
    wait_until(lambda: any(pid == w1.pid for _, pid in _runs(runs_dir).get(h.id, [])),
               timeout=30)  # attempt 1 ran to its end on w1
    wait_until(lambda: "lease lost before it was settled" in _log(w1)
               or len(_signals(tmp_path)) > 1, timeout=30, step=0.05)
    row = Job.objects.get(pk=h.id)
    assert [(a, w.split(":")[0]) for _, a, w in _signals(tmp_path)] == [(2, "w2")], (
        _signals(tmp_path))
    assert (row.status, row.attempts, row.worker_id.split(":")[0]) == (
        JobStatus.SUCCEEDED, 2, "w2")
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list(
        "number", "error_type")) == [(1, type_path(LeaseLost))]  # the lease recovery's
    assert sorted(a for a, _ in _runs(runs_dir)[h.id]) == [1, 2]
    stop(w1)
    stop(w2)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's single writer")
def test_an_atomic_attempt_stalled_in_its_transaction_commits_and_runs_once(  # type: ignore[no-untyped-def]
        start, runs_dir) -> None:
    """w1 runs an atomic 3 s job and is stopped inside its transaction, holding SQLite's
    write lock; w2 takes the lease back (its record of attempt 1 as lost waits for the
    lock) and starts attempt 2, whose transaction waits for the lock. w1 continued
    commits attempt 1; w2 then reads that commit and settles the job without calling
    the function: one run, the row attempt 1's, no record of attempt 1 as lost."""
    h = schedule("tests.jobs_chaos.slow_first", runs_dir, 3.0, atomic=True)
    w1 = start("w1", "--concurrency", "2")
    wait_until((Path(runs_dir) / "started").exists, timeout=60)
    os.kill(w1.pid, signal.SIGSTOP)
    _wait_stopped(w1)
    try:
        assert not _writable(str(connection.settings_dict["NAME"]))  # w1 holds the lock
        # its checks skipped: Django's test of SQLite's JSON support opens a transaction
        # (BEGIN IMMEDIATE), which the lock refuses: "SQLite does not support JSONFields"
        w2 = start("w2", "--concurrency", "2", "--skip-checks")
        _wait_logged(lambda: _held(h.id) == 2, w1, w2)  # w2 took attempt 2
    finally:
        os.kill(w1.pid, signal.SIGCONT)
    _wait_logged(lambda: _held(h.id) == 0, w1, w2)  # settled
    stop(w1)
    stop(w2)  # its audit written
    assert [a for a, _ in _runs(runs_dir)[h.id]] == [1], _log(w2)[-4000:]
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.attempts, row.worker_id.split(":")[0]) == (
        JobStatus.SUCCEEDED, 1, "w1")
    assert not JobAttempt.objects.filter(job_id=h.id).exists()


def test_a_stalled_worker_starts_none_of_the_jobs_it_held_once_continued(  # type: ignore[no-untyped-def]
        start, runs_dir) -> None:
    """w1 (``--concurrency 1``) runs a 4 s job and holds six more claimed, not started;
    stopped, w2 takes them all back and runs them. Continued after the long job's time
    is up, w1's thread is free at once: it must start none of the six (their leases went
    while it was stopped), whether its heartbeat found that out first or not. A fixed
    ``--prefetch`` holds them (by pace, a worker whose jobs stopped ending hands them back)."""
    w1 = start("w1", "--concurrency", "1", "--prefetch", "6")
    warm = schedule_many("tests.jobs_chaos.mark_run", [JobSpec(args=(runs_dir,))] * 10)
    wait_until(lambda: Job.objects.filter(id__in=warm, status=JobStatus.SUCCEEDED).count()
               == len(warm), timeout=60)
    slow = schedule("tests.jobs_chaos.slow_first", runs_dir, 4.0)
    wait_until((Path(runs_dir) / "started").exists, timeout=30)
    began = time.monotonic()
    held = schedule_many("tests.jobs_chaos.mark_run", [JobSpec(args=(runs_dir, 0.3))] * 6)
    wait_until(lambda: (i := _info("w1")) is not None and i[1]["waiting"] == len(held),
               timeout=30)
    _stall(w1)
    try:
        assert time.monotonic() - began < 4.0, "the long job ended before the stop"
        w2 = start("w2", "--concurrency", "2")
        wait_until(lambda: Job.objects.filter(id__in=held, status=JobStatus.SUCCEEDED)
                   .count() == len(held), timeout=90, step=0.1)
        wait_until(lambda: time.monotonic() - began > 4.5, timeout=30)  # its time is up
        continued_ms = get_engine().time_ms()
    finally:
        os.kill(w1.pid, signal.SIGCONT)
    wait_until(lambda: (i := _info("w1")) is not None and i[0] > continued_ms
               and (i[1]["running"], i[1]["waiting"]) == (0, 0), timeout=60, step=0.1)
    runs = _runs(runs_dir)
    assert (1, w1.pid) in runs[slow.id]  # the run under way at the stop ran out on w1
    twice = {job_id: runs[job_id] for job_id in held if len(runs[job_id]) != 1}
    assert not twice, "held jobs w1 ran after its leases went: %s (w1 is %d)" % (
        twice, w1.pid)
    assert {pid for job_id in held for _, pid in runs[job_id]} == {w2.pid}
    wait_until(_all_final, timeout=90)
    stop(w1)
    stop(w2)


def _stopped(pid: int) -> bool:
    """Whether every thread of the process ``pid`` is stopped (/proc)."""
    return all(Path(task, "stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
               for task in Path("/proc/%d/task" % pid).iterdir())


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
def test_a_stalled_process_holds_no_write_lock_when_its_stop_lands_late(  # type: ignore[no-untyped-def]
        tmp_path, monkeypatch) -> None:
    """kill() returns before the process stops: one of its threads must be scheduled to act
    on the SIGSTOP, and on a loaded machine the others run on meanwhile. A transaction one
    of them begins then is held through the stop, and every other writer waits for ever
    (w2 could not record the job it took back and ran). Here the first SIGSTOP lands 0.5 s
    after it is sent, and the process begins a transaction in between: ``_stall`` returns
    only once the process is stopped holding no write lock."""
    database = str(tmp_path / "held.sqlite3")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, database], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    stdin, stdout = holder.stdin, holder.stdout
    assert stdin is not None and stdout is not None
    real_kill, sent = os.kill, list[threading.Timer]()

    def late(pid: int, signum: int) -> None:
        if signum == signal.SIGSTOP and not sent:
            stdin.write("begin\n")
            stdin.flush()
            sent.append(threading.Timer(0.5, real_kill, (pid, signum)))
            sent[-1].start()
        else:
            real_kill(pid, signum)

    try:
        assert stdout.readline() == "ready\n"
        monkeypatch.setattr(os, "kill", late)
        _stall(holder, database)
        sent[0].join()
        wait_until(lambda: _stopped(holder.pid), timeout=30)
        assert _writable(database), "stopped holding the write lock"
    finally:
        monkeypatch.undo()
        holder.kill()
        holder.wait()
