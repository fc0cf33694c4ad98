"""Fixtures of the reliability tests: Redis servers of their own to stop, pause, wipe."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from django.db import connection

from tests.conftest import unique_prefix
from tests.redis_server import RedisServer, binaries
from tests.worker import conftest as worker

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = ["tests.jobs", "tests.jobs_chaos", "tests.jobs_attack"]  # as worker_settings


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


def point_at(settings, server: RedisServer, **extra) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": server.url, "PREFIX": unique_prefix(),
                       "ALLOWED_CALLABLES": ALLOWED, **extra}


@pytest.fixture
def exec_table() -> None:
    from tests import jobs_chaos

    jobs_chaos.create_table()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM chaos_exec")


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within %.1fs" % timeout)
        time.sleep(step)


WORKER_SETTINGS = "tests.reliability.worker_settings"


def worker_env(settings) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return worker.worker_env(settings, WORKER_SETTINGS)


@pytest.fixture
def start_worker(settings, tmp_path) -> Iterator[Callable[..., subprocess.Popen[str]]]:  # type: ignore[no-untyped-def]
    yield from worker.worker_starter(settings, tmp_path, WORKER_SETTINGS)


def timeout_client(server: RedisServer, seconds: float = 0.3) -> redis.Redis:
    return redis.Redis.from_url(server.url, socket_timeout=seconds, socket_connect_timeout=seconds)


def burst(queues: tuple[str, ...] = ("default",), concurrency: int = 2) -> int:
    """A real Worker in this process, in burst mode: runs what is due, returns its exit code."""
    from django_delayq.core.conf import get_settings
    from django_delayq.core.connection import get_engine
    from django_delayq.worker.loop import Worker, WorkerOptions

    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=queues, concurrency=concurrency, burst=True))
    return worker.run()
