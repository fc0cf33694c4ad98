"""A job that ends while its worker cannot reach Redis, and the worker then killed (or
drained, then killed): the run ended before the process died, so it must not run again.
Its final row is written while the lease is the worker's (``worker/early_rows.py``); a
worker that later claims the job sets it aside, the reconciler leaves it alone. A retry
behaves as before (no early row: it is to run again), and a worker that reaches Redis
again settles as usual, its signals sent once.

Real ``delayq_worker`` subprocesses (``--worker-id w1`` runs the job, ``w2`` comes after),
the test database, a private redis-server with AOF (stopped for the outage, started again
with its data). The job (``jobs_chaos.gated``) waits for a file the test writes after
Redis is stopped, then appends its run (job id, attempt, pid) to a file; the settings
module below has each worker append every lifecycle signal it sends to another file.
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.exceptions import LeaseLost, type_path
from django_delayq.models import Job, JobAttempt, JobStatus
from tests.helpers import point_at, wait_until
from tests.reliability.conftest import kill, signals_module, stop
from tests.reliability.proxy import LossyProxy
from tests.worker import conftest as worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LEASE = 3.0
MODULE = "delayq_outage_rows_settings"
LEASE_LOST = type_path(LeaseLost)
# every lifecycle signal a worker sends: "<signal> <job id> <attempt> <worker id>"
SETTINGS = """
import os

from django_delayq import signals as _signals
from tests.reliability.worker_settings import *  # noqa: F403


def _sent(name):
    def receiver(sender, job_id, attempt, worker_id="", **kwargs):
        with open(os.environ["DELAYQ_TEST_SIGNALS"], "a") as out:
            out.write("%s %s %d %s\\n" % (name, job_id, attempt, worker_id or "-"))
    return receiver


for _name in ("job_succeeded", "job_dead", "job_retrying"):
    getattr(_signals, _name).connect(_sent(_name), weak=False)
"""


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path


@pytest.fixture
def start(settings, fault_server, tmp_path,  # type: ignore[no-untyped-def]
          monkeypatch) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """start(name): a ``delayq_worker --worker-id name --concurrency 1``."""
    point_at(settings, fault_server, LEASE_SECONDS=LEASE, RECOVER_INTERVAL_SECONDS=0.2,
             RECONCILE_INTERVAL_SECONDS=0.5, RECONCILE_GRACE_SECONDS=1)
    signals_module(tmp_path, monkeypatch, MODULE, SETTINGS)
    starter = worker.worker_starter(settings, tmp_path, MODULE)
    begin = next(starter)
    yield lambda name: begin("--queues", "default", "--worker-id", name, "--concurrency", "1")
    next(starter, None)  # SIGKILLs the survivors


def _signals(tmp_path: Path) -> list[tuple[str, int, str]]:
    """(signal, attempt, worker name) of each signal sent."""
    return [(f[0], int(f[2]), f[3].split(":")[0])
            for f in (line.split() for line in (tmp_path / "signals").read_text().splitlines())]


def _runs(runs_dir: Path) -> list[tuple[int, int]]:
    """(attempt, pid) of each completed run."""
    path = runs_dir / "runs"
    return [(int(f[1]), int(f[2])) for f in (line.split() for line in (
        path.read_text().splitlines() if path.exists() else []))]


def _log(proc: subprocess.Popen[str]) -> str:
    return worker.LOGS[proc.pid].read_text(errors="replace")


def _row(job_id: str) -> tuple[str, int, str]:
    row = Job.objects.get(pk=job_id)
    return row.status, row.attempts, row.worker_id.split(":")[0]


def _end_during_outage(runs_dir: Path, fault_server, w1: subprocess.Popen[str],  # type: ignore[no-untyped-def]
                       *, drain: bool = False) -> None:
    """Stop Redis while w1 runs the gated job (drain: then SIGTERM w1), let the run end,
    and wait until w1 found that it cannot settle it (the early rows, if any, are written
    before that failure is logged)."""
    wait_until((runs_dir / "started").exists, timeout=60)
    fault_server.stop()
    if drain:
        w1.send_signal(signal.SIGTERM)
    (runs_dir / "go").touch()
    wait_until(lambda: len(_runs(runs_dir)) == 1, timeout=30)
    wait_until(lambda: "settling finished jobs failed" in _log(w1)
               or "could not settle" in _log(w1), timeout=30, step=0.05)


def _kill_once_final(w1: subprocess.Popen[str], job_id: str, status: str) -> None:
    """SIGKILL w1 once the job's row is ``status`` (its early row), or 20 s on (without
    it: the kill then shows what becomes of the job)."""
    with contextlib.suppress(AssertionError):
        wait_until(lambda: _row(job_id)[0] == status, timeout=20, step=0.05)
    kill(w1)


def _restore_and_take_over(fault_server, start, job_id: str,  # type: ignore[no-untyped-def]
                           runs_dir: Path) -> subprocess.Popen[str]:
    """Redis back, w2 started: until w2 set the job aside, ran it again, or ended it (its
    lease recovery puts a job whose start Redis counted on its last attempt in the dead
    set: w2 then claims nothing)."""
    fault_server.start()
    w2 = start("w2")
    wait_until(lambda: "set aside" in _log(w2) or len(_runs(runs_dir)) > 1
               or JobAttempt.objects.filter(job_id=job_id, error_type=LEASE_LOST).exists()
               or get_engine().inspect("default", job_id).place == "dead",
               timeout=90, step=0.1)
    return w2


def _left_alone(job_id: str, place: str = "") -> None:
    """Redis holds the job nowhere (``place``: only there), and the reconciler puts
    nothing back."""
    wait_until(lambda: get_engine().inspect("default", job_id).place == place, timeout=30)
    s = get_settings()
    assert Reconciler(get_engine(), s, s.queues).run_all(grace_seconds=0) == 0


@pytest.mark.parametrize("drain", [False, True], ids=["kill", "drain-then-kill"])
def test_a_success_ended_during_an_outage_does_not_run_again_after_a_kill(  # type: ignore[no-untyped-def]
        start, fault_server, runs_dir, tmp_path, drain) -> None:
    h = schedule("tests.jobs_chaos.gated", str(runs_dir))
    w1 = start("w1")
    _end_during_outage(runs_dir, fault_server, w1, drain=drain)
    _kill_once_final(w1, h.id, JobStatus.SUCCEEDED)
    w2 = _restore_and_take_over(fault_server, start, h.id, runs_dir)
    assert _runs(runs_dir) == [(1, w1.pid)], "ran again after the kill: %s" % _runs(runs_dir)
    assert _row(h.id) == (JobStatus.SUCCEEDED, 1, "w1")
    assert Job.objects.get(pk=h.id).result == "done 1"
    assert not _signals(tmp_path), _signals(tmp_path)  # not w2's lease recovery's either
    assert not JobAttempt.objects.filter(job_id=h.id).exists()  # no attempt "lost"
    _left_alone(h.id)
    assert _runs(runs_dir) == [(1, w1.pid)]
    stop(w2)


@pytest.mark.parametrize("options", [{"max_attempts": 1},
                                     {"max_attempts": 3, "retry_on": [LookupError]}],
                         ids=["last-attempt", "not-retried"])
def test_a_final_failure_ended_during_an_outage_does_not_run_again_after_a_kill(  # type: ignore[no-untyped-def]
        start, fault_server, runs_dir, tmp_path, options) -> None:
    """Dead at attempt 1 (its last, or an error it is not retried on): its row says so,
    with its error; not a lost attempt's, and no second run."""
    h = schedule("tests.jobs_chaos.gated", str(runs_dir), 1, **options)
    w1 = start("w1")
    _end_during_outage(runs_dir, fault_server, w1)
    _kill_once_final(w1, h.id, JobStatus.DEAD)
    w2 = _restore_and_take_over(fault_server, start, h.id, runs_dir)
    assert _runs(runs_dir) == [(1, w1.pid)], "ran again after the kill: %s" % _runs(runs_dir)
    assert _row(h.id) == (JobStatus.DEAD, 1, "w1")
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list(
        "number", "outcome", "error_type")) == [(1, JobStatus.DEAD, "builtins.RuntimeError")]
    assert _signals(tmp_path) == []
    # set aside at its next claim, or (its start counted in Redis, its last attempt) in
    # Redis's dead set, as its row says
    place = get_engine().inspect("default", h.id).place
    assert place in ("", "dead") if options["max_attempts"] == 1 else place == "", place
    _left_alone(h.id, place)
    stop(w2)


def test_a_retry_ended_during_an_outage_gets_no_early_row_and_runs_again(  # type: ignore[no-untyped-def]
        start, fault_server, runs_dir) -> None:
    """Not final: its row stays ``running`` through the outage; after the kill, the job is
    taken back and runs again, as before."""
    h = schedule("tests.jobs_chaos.gated", str(runs_dir), 1, max_attempts=3)
    w1 = start("w1")
    _end_during_outage(runs_dir, fault_server, w1)
    wait_until(lambda: _row(h.id) == (JobStatus.RUNNING, 1, "w1"), timeout=20)  # its start row
    assert _row(h.id) == (JobStatus.RUNNING, 1, "w1")  # no early row, after the outage's failure
    kill(w1)
    fault_server.start()
    w2 = start("w2")
    wait_until(lambda: _row(h.id)[0] == JobStatus.SUCCEEDED, timeout=90, step=0.1)
    assert [a for a, _ in _runs(runs_dir)][0] == 1 and len(_runs(runs_dir)) == 2
    assert _row(h.id)[1] >= 2
    stop(w2)


@pytest.mark.parametrize(("fail", "status", "sent"), [
    (0, JobStatus.SUCCEEDED, "job_succeeded"), (1, JobStatus.DEAD, "job_dead")])
def test_a_worker_that_reaches_redis_again_settles_once(  # type: ignore[no-untyped-def]
        start, fault_server, runs_dir, tmp_path, fail, status, sent) -> None:
    """No kill: the early row, then Redis back, the ack or nack lands and the usual record
    follows: the row unchanged, one signal, one ``JobAttempt`` of a failure, nothing left
    in Redis, no second run."""
    h = schedule("tests.jobs_chaos.gated", str(runs_dir), fail, max_attempts=1)
    w1 = start("w1")
    _end_during_outage(runs_dir, fault_server, w1)
    wait_until(lambda: _row(h.id)[0] == status, timeout=20, step=0.05)
    early = Job.objects.get(pk=h.id)
    assert not _signals(tmp_path)  # signals wait for Redis
    fault_server.start()
    wait_until(lambda: bool(_signals(tmp_path)), timeout=60, step=0.05)
    _left_alone(h.id, "dead" if fail else "")  # a dead job stays in the dead set
    stop(w1)
    assert _signals(tmp_path) == [(sent, 1, "w1")]
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.attempts, row.updated_at, row.result) == (
        early.status, 1, early.updated_at, early.result)
    assert JobAttempt.objects.filter(job_id=h.id).count() == fail
    assert _runs(runs_dir) == [(1, w1.pid)]


@contextlib.contextmanager
def _row_locked(job_id: str) -> Iterator[None]:
    """A database stall of the job's row while the block runs: another connection holds
    it locked (PostgreSQL: ``SELECT ... FOR UPDATE``; SQLite: the write lock)."""
    if connection.vendor == "sqlite":
        lite = sqlite3.connect(str(connection.settings_dict["NAME"]), isolation_level=None)
        lite.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            lite.execute("ROLLBACK")
            lite.close()
        return
    other = connection.copy()
    other.ensure_connection()
    raw = other.connection
    raw.autocommit = False
    raw.execute("SELECT 1 FROM %s WHERE id = %%s FOR UPDATE" % Job._meta.db_table, (job_id,))
    try:
        yield
    finally:
        raw.rollback()
        other.close()


def _start_behind(proxy: LossyProxy, settings, start,  # type: ignore[no-untyped-def]
                  name: str) -> subprocess.Popen[str]:
    """start(name) reaching Redis through ``proxy`` (a partition of its own)."""
    direct = settings.DELAYQ
    settings.DELAYQ = {**direct, "REDIS_URL": proxy.url}
    try:
        return start(name)
    finally:
        settings.DELAYQ = direct


@pytest.mark.skipif(connection.vendor != "postgresql", reason=(
    "a lock on SQLite is the whole database's: wB cannot record wA's lost attempt, nor run "
    "the job again, while it is held; the PostgreSQL pass runs this test"))
def test_an_early_row_never_commits_once_the_lease_may_have_passed(  # type: ignore[no-untyped-def]
        start, fault_server, runs_dir, tmp_path, settings) -> None:
    """wA, cut from Redis alone, ends the job while its row is locked: its early write
    waits, its lease lapses, wB takes the job back and runs it again, then the lock goes.
    wA's early row must not commit then (it would hide run 2 behind run 1's success): the
    row is wB's, as Redis and the signals say, and run 1 is recorded as a lost attempt."""
    h = schedule("tests.jobs_chaos.gated", str(runs_dir))
    proxy = LossyProxy(fault_server.port)
    wa = _start_behind(proxy, settings, start, "wA")
    wait_until((runs_dir / "started").exists, timeout=60)
    wb = start("wB")  # it takes the job back once wA's lease lapsed
    engine = get_engine()  # its start mark in Redis (sent corked): the run is charged
    wait_until(lambda: engine.client.hexists(engine.keys("default").runs, h.id), timeout=20)
    proxy.cut()
    with _row_locked(h.id):
        (runs_dir / "go").touch()
        wait_until(lambda: len(_runs(runs_dir)) == 2, timeout=60, step=0.05)  # wB's run 2
    wait_until(lambda: ("job_succeeded", 2, "wB") in _signals(tmp_path), timeout=60)
    wait_until(lambda: _row(h.id)[0] == JobStatus.SUCCEEDED, timeout=60, step=0.05)
    kill(wa)
    proxy.close()
    assert [a for a, _ in _runs(runs_dir)] == [1, 2]
    assert _row(h.id) == (JobStatus.SUCCEEDED, 2, "wB"), _row(h.id)
    assert Job.objects.get(pk=h.id).result == "done 2"
    wait_until(lambda: JobAttempt.objects.filter(job_id=h.id).exists(), timeout=30)
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list(
        "number", "error_type")) == [(1, LEASE_LOST)]  # run 1: its outcome died with wA
    assert _signals(tmp_path).count(("job_succeeded", 2, "wB")) == 1
    assert not [s for s in _signals(tmp_path) if s[0] == "job_succeeded" and s[2] == "wA"]
    stop(wb)


def test_acks_land_during_a_database_stall(  # type: ignore[no-untyped-def]
        start, fault_server, runs_dir, settings) -> None:
    """A Redis blip as the job ends, during a stall of its row: the early write waits on
    its own thread, the ack lands when Redis is back, stall or not; a kill then does not
    run the job again."""
    h = schedule("tests.jobs_chaos.gated", str(runs_dir))
    proxy = LossyProxy(fault_server.port)
    wa = _start_behind(proxy, settings, start, "wA")
    wait_until((runs_dir / "started").exists, timeout=60)
    wait_until(lambda: _row(h.id)[0] == JobStatus.RUNNING, timeout=20)  # its start row
    with _row_locked(h.id):
        proxy.cut()
        (runs_dir / "go").touch()
        wait_until(lambda: len(_runs(runs_dir)) == 1, timeout=30, step=0.05)
        with contextlib.suppress(AssertionError):  # the settling round failed
            wait_until(lambda: "settling finished jobs failed" in _log(wa), timeout=5,
                       step=0.05)
        proxy.restore()
        wait_until(lambda: get_engine().inspect("default", h.id).place == "", timeout=20,
                   step=0.05)  # acked, the row still locked
        kill(wa)
    proxy.close()
    w2 = start("w2")
    wait_until(lambda: _row(h.id)[0] == JobStatus.SUCCEEDED, timeout=60, step=0.1)
    assert _row(h.id) == (JobStatus.SUCCEEDED, 1, "wA")
    assert _runs(runs_dir) == [(1, wa.pid)]
    stop(w2)
