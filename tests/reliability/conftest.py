"""Fixtures of the reliability tests: Redis servers of their own to stop, pause, wipe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection

# Shared helpers, importable from here too (tests/helpers.py holds them):
from tests.helpers import ALLOWED as ALLOWED
from tests.helpers import burst as burst
from tests.helpers import point_at as point_at
from tests.helpers import wait_until as wait_until
from tests.redis_server import RedisServer, binaries
from tests.worker import conftest as worker

ROOT = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: the chaos run (bench/chaos.py) in small")


def debug_flags(binary: str) -> list[str]:
    """Redis 7 refuses DEBUG unless enabled; 6.2 does not know the option."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    major = int(out.split("v=")[1].split(".")[0]) if "v=" in out else 6
    return ["--enable-debug-command", "yes"] if major >= 7 else []


@pytest.fixture
def fault_server() -> Iterator[RedisServer]:
    """A private redis-server per test (AOF on, so a restart keeps the data)."""
    binary = binaries()[0]
    server = RedisServer(binary, extra=["--appendonly", "yes", "--appendfsync", "always",
                                        *debug_flags(binary)]).start()
    yield server
    server.cleanup()


@pytest.fixture
def volatile_server() -> Iterator[RedisServer]:
    """A private redis-server with no persistence: a restart loses everything."""
    server = RedisServer(binaries()[0]).start()
    yield server
    server.cleanup()


@pytest.fixture
def exec_table() -> None:
    from tests import jobs_chaos

    jobs_chaos.create_table()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM chaos_exec")


WORKER_SETTINGS = "tests.reliability.worker_settings"


def worker_env(settings) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return worker.worker_env(settings, WORKER_SETTINGS)


@pytest.fixture
def start_worker(settings, tmp_path) -> Iterator[Callable[..., subprocess.Popen[str]]]:  # type: ignore[no-untyped-def]
    yield from worker.worker_starter(settings, tmp_path, WORKER_SETTINGS)


def timeout_client(server: RedisServer, seconds: float = 0.3) -> redis.Redis:
    return redis.Redis.from_url(server.url, socket_timeout=seconds, socket_connect_timeout=seconds)


# -- worker subprocesses with extra settings (each test's own DELAYQ overrides) ----------

SETTINGS_MODULE = "delayq_nodup_settings"


@pytest.fixture
def cfg(settings, redis_server, exec_table):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    return settings


@pytest.fixture
def start_with(cfg, tmp_path, monkeypatch) -> Iterator[Callable[..., subprocess.Popen[str]]]:  # type: ignore[no-untyped-def]
    """start(extra_delayq, *args): a worker with the reliability settings plus ``extra``."""
    (tmp_path / (SETTINGS_MODULE + ".py")).write_text(
        "import json\nimport os\n\n"
        "from %s import *  # noqa: F403\nfrom %s import DELAYQ as _BASE\n\n"
        "DELAYQ = {**_BASE, **json.loads(os.environ.get('DELAYQ_TEST_EXTRA', '{}'))}\n"
        % (WORKER_SETTINGS, WORKER_SETTINGS))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p))
    starter = worker.worker_starter(cfg, tmp_path, SETTINGS_MODULE)
    start = next(starter)

    def start_with_extra(extra: dict[str, Any], *args: str) -> subprocess.Popen[str]:
        monkeypatch.setenv("DELAYQ_TEST_EXTRA", json.dumps(extra))
        return start(*args)

    yield start_with_extra
    next(starter, None)  # SIGKILLs the survivors


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()




def signals_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str,
                   text: str) -> None:
    """The worker settings module ``module`` (``text``) importable by the worker processes,
    and its file ``signals`` (``DELAYQ_TEST_SIGNALS``) created empty."""
    (tmp_path / (module + ".py")).write_text(text)
    (tmp_path / "signals").touch()
    monkeypatch.setenv("DELAYQ_TEST_SIGNALS", str(tmp_path / "signals"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p))
