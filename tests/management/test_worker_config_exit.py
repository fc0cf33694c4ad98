"""``manage.py delayq_worker`` with a bad DELAYQ setting exits 2 ("a bad setting or option,
nothing ran"), whether Django's system checks find it or, with ``--skip-checks``,
``get_settings()`` does; the message names the setting, without a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from django_delayq.worker.tracking import EXIT_CONFIG, EXIT_OK
from tests.helpers import wait_until
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]

BAD = {
    "CONCURRENCY=0": ({"CONCURRENCY": 0}, "delayq.E018"),
    "a typo'd key": ({"CONCURENCY": 2}, "delayq.E001"),
    "ALLOWED_CALLABLES unset": ({"ALLOWED_CALLABLES": None}, "delayq.E025"),
    "no such cache": ({"CACHE_ALIAS": "nope"}, "delayq.E003"),
    "not a django-redis cache": ({"CACHE_ALIAS": "default"}, "delayq.E003"),
    "a schedule's negative jitter": ({"SCHEDULES": {
        "good": {"callable": "tests.jobs.noop", "interval": 600},
        "bad": {"callable": "tests.jobs.noop", "interval": 600, "jitter": -1}}}, "delayq.E032"),
    # JSON's NaN and Infinity: the lease in ms was a ValueError, an OverflowError (exit 1)
    "LEASE_SECONDS=NaN": ({"LEASE_SECONDS": float("nan")}, "delayq.E010"),
    "LEASE_SECONDS=Infinity": ({"LEASE_SECONDS": float("inf")}, "delayq.E010"),
    # redis-py's ValueError when the engine was made (exit 1: a supervisor restarts it)
    "a port out of range": ({"REDIS_URL": "redis://127.0.0.1:99999/0"}, "delayq.E002"),
    # redis-py's TypeError when the first connection was made (exit 1, a traceback)
    "an unknown query option": ({"REDIS_URL": "redis://127.0.0.1:7324/0?foo=bar"},
                                "delayq.E002"),
    "a queue name no --queues can name": ({"QUEUES": ["default", "a,b"]}, "delayq.E005"),
}


def _env(tmp_path: Path, overrides: dict[str, object]) -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.management.delayq_overrides",
            "DELAYQ_TEST_OVERRIDES": json.dumps(overrides),
            "DELAYQ_TEST_SQLITE": str(tmp_path / "db.sqlite3"),
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _worker(tmp_path: Path, overrides: dict[str, object], *args: str,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "django", "delayq_worker", "--burst", *args],
                          cwd=ROOT, env=_env(tmp_path, overrides), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_setting_found_by_the_checks_exits_2(tmp_path: Path, case: str) -> None:
    overrides, check_id = BAD[case]
    proc = _worker(tmp_path, overrides)
    assert proc.returncode == EXIT_CONFIG == 2, proc.stderr
    assert "SystemCheckError" in proc.stderr and check_id in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("case", ["CONCURRENCY=0", "a typo'd key", "no such cache",
                                  "not a django-redis cache", "a schedule's negative jitter",
                                  "LEASE_SECONDS=NaN", "LEASE_SECONDS=Infinity",
                                  "a port out of range", "an unknown query option",
                                  "a queue name no --queues can name"])
def test_a_bad_setting_with_skip_checks_exits_2_naming_it(tmp_path: Path, case: str) -> None:
    overrides, _check_id = BAD[case]
    proc = _worker(tmp_path, overrides, "--skip-checks")
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    (key,) = overrides
    assert "delayq_worker: " in proc.stderr and "DELAYQ[%r]" % key in proc.stderr \
        or "unknown DELAYQ key %r" % key in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("options", "named"), [
    ({"MAX_ATTEMPTS": 0}, "TASKS['default']['OPTIONS']['MAX_ATTEMPTS']: max_attempts must be"),
    ([], "TASKS['default']['OPTIONS'] must be a dict (its keys: BACKOFF, GROUP, MAX_ATTEMPTS)"),
])
def test_a_bad_tasks_backend_option_exits_2_naming_it(tmp_path: Path, options: object,
                                                      named: str) -> None:
    """The checks build the Tasks backend (Django 6.x; on 5.2 with ``django_tasks``
    installed): a bad ``OPTIONS`` value is a bad setting, one line, nothing ran."""
    env = {**_env(tmp_path, {}), "DELAYQ_TEST_TASK_OPTIONS": json.dumps(options)}
    proc = subprocess.run([sys.executable, "-m", "django", "delayq_worker", "--burst"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    assert "delayq_worker: " + named in proc.stderr and "Traceback" not in proc.stderr


def test_metrics_port_without_prometheus_client_exits_2_naming_the_extra(tmp_path: Path,
                                                                         ) -> None:
    """Without the ``prometheus`` extra, asking for metrics is a bad option: one line
    naming the extra, nothing ran (it was a traceback from inside the worker)."""
    hide = ("import sys; sys.modules['prometheus_client'] = None; "
            "from django.core.management import execute_from_command_line as run; "
            "run(['manage.py', 'delayq_worker', '--burst', '--skip-checks', "
            "'--metrics-port', '18397'])")
    proc = subprocess.run([sys.executable, "-c", hide], cwd=ROOT, env=_env(tmp_path, {}),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    assert "--metrics-port needs prometheus-client" in proc.stderr
    assert "django-delayq[prometheus]" in proc.stderr and "Traceback" not in proc.stderr


def _stopped_while_waiting(tmp_path: Path, *args: str, **env: str) -> str:
    """``delayq_worker --skip-checks *args`` (``env`` added to its environment) with no
    Redis to reach, sent SIGTERM once it waits for one: it must exit 0; its log."""
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "delayq_worker", "--skip-checks", *args],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
            env={**_env(tmp_path, {"REDIS_URL": "redis://127.0.0.1:%d/0" % free_port()}),
                 **env})
    try:
        wait_until(lambda: "waiting for Redis" in log.read_text(), timeout=60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == EXIT_OK, log.read_text()
    finally:
        proc.kill()
        proc.wait()
    return log.read_text()


@pytest.mark.parametrize("processes", [[], ["--processes", "2"]])
def test_sigterm_while_waiting_for_redis_exits_0(tmp_path: Path, processes: list[str]) -> None:
    """A worker (or supervisor) asked to stop while it waits for Redis at start-up stops
    cleanly, exit 0, nothing having run: it was killed by the signal (exit 143)."""
    assert "stopped while waiting for Redis" in _stopped_while_waiting(tmp_path, *processes)


def test_metrics_addr_without_metrics_port_exits_2(tmp_path: Path) -> None:
    """``--metrics-addr`` alone serves nothing: refused, as other bad options are (it was
    ignored, the worker running without the metrics its operator asked for)."""
    proc = _worker(tmp_path, {}, "--skip-checks", "--metrics-addr", "0.0.0.0")
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    assert "--metrics-addr 0.0.0.0 needs --metrics-port" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_projects_logging_entry_prints_each_line_once(tmp_path: Path) -> None:
    """docs/guide.md: a ``LOGGING`` entry for ``django_delayq`` shows the worker's lines.
    The worker adds its own handler only where the project gave none (each line was
    printed twice: the project's handler, then the root's, through propagation)."""
    log = _stopped_while_waiting(tmp_path, DELAYQ_TEST_LOGGING="INFO")
    assert log.count("stopped while waiting for Redis") == 1, log
