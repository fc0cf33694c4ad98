"""Real worker subprocesses: same test database, same private Redis, same prefix."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers import wait_until as wait_until  # shared helper, importable from here too

ROOT = Path(__file__).resolve().parents[2]
LOGS: dict[int, Path] = {}  # pid -> the log of a worker subprocess (its stdout and stderr)


def worker_env(settings, module: str = "tests.settings") -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = module
    env["DELAYQ_REDIS_URL"] = settings.DELAYQ["REDIS_URL"]
    env["DELAYQ_TEST_PREFIX"] = settings.DELAYQ["PREFIX"]
    env["DELAYQ_TEST_LEASE"] = str(settings.DELAYQ.get("LEASE_SECONDS", 10))
    name = str(connection.settings_dict["NAME"])
    env["DELAYQ_TEST_SQLITE" if connection.vendor == "sqlite" else "DELAYQ_TEST_DBNAME"] = name
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT (``wait_or_dump``): every thread's stack
    return env


def wait_or_dump(proc: subprocess.Popen[str], timeout: float) -> int:
    """``proc``'s exit code. Still running after ``timeout`` seconds: SIGABRT, on which it
    writes the stack of each of its threads to its log (``PYTHONFAULTHANDLER``), and an
    AssertionError that shows the log's end: where the worker was stuck."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        log = LOGS.get(proc.pid)
        tail = log.read_text(errors="replace")[-12000:] if log else "(no log)"
        raise AssertionError("worker %d still running %gs on; its log ends:\n%s"
                             % (proc.pid, timeout, tail)) from None


def worker_starter(settings, tmp_path, module: str = "tests.settings",  # type: ignore[no-untyped-def]
                   entry: tuple[str, ...] = ("django", "delayq_worker"),
                   session: bool = False) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Yield start(*args) -> a `delayq_worker` subprocess (``python -m *entry *args``);
    SIGKILL the survivors after. ``session``: each the leader of a session (and process
    group) of its own, as a terminal or a service manager starts it; each group still there
    is SIGKILLed after."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        log = open(tmp_path / ("worker-%d.log" % len(procs)), "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", *entry, *args],
            cwd=ROOT, env=worker_env(settings, module), stdout=log, stderr=subprocess.STDOUT,
            text=True, start_new_session=session)
        procs.append(proc)
        LOGS[proc.pid] = Path(log.name)
        return proc

    yield start
    for proc in procs:
        if session:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        elif proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.fixture
def start_worker(delayq_settings, tmp_path) -> Iterator[Callable[..., subprocess.Popen[str]]]:  # type: ignore[no-untyped-def]
    yield from worker_starter(delayq_settings, tmp_path)


def run_claimed(worker, claimed) -> None:  # type: ignore[no-untyped-def]
    """Run ``claimed`` (loaded jobs) as the worker's job threads would, each a success,
    and leave their outcomes in its ledger: no job thread sends them."""
    from django_delayq.core.conf import get_settings
    from django_delayq.worker import runner
    from django_delayq.worker.ledger import key_of

    worker.ledger.claimed(claimed)
    for job in claimed:
        assert worker.ledger.start(job)
        outcome = runner.run(job, worker_id=worker.id, default_max_attempts=3,
                             default_backoff=get_settings().default_backoff,
                             manage_connections=False)
        assert outcome.kind is runner.Kind.SUCCESS
        worker.ledger.finish(key_of(job), outcome)
