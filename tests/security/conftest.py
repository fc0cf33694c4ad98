"""Fixtures of the allow-list tests: the reliability tests' private Redis, prefix,
allow-list (which lists ``tests.jobs_attack``) and real worker subprocesses."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests.helpers import point_at
from tests.reliability.conftest import WORKER_SETTINGS
from tests.worker import conftest as worker


@pytest.fixture
def cfg(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    return settings


@pytest.fixture
def start_worker(cfg, tmp_path) -> Iterator[Callable[..., subprocess.Popen[str]]]:  # type: ignore[no-untyped-def]
    """``delayq_worker`` subprocesses with tests/reliability/worker_settings.py."""
    yield from worker.worker_starter(cfg, tmp_path, WORKER_SETTINGS)
