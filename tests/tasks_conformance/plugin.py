"""pytest plugin: the smallest adaptation of Django's ``tests/tasks`` to the DelayQ backend.

Loaded by ``scripts/tasks_conformance.py`` (``-p tests.tasks_conformance.plugin``):

* Django's reference backends are replaced, under their own names, by DelayQ backends
  (``backends.py``): ``DummyBackend`` enqueues, ``ImmediateBackend`` enqueues and runs a
  real worker at once. Django's tests are otherwise unchanged.
* Results are audit rows here, so Django's ``SimpleTestCase`` tests get the database, and
  ``DJANGO_ALLOW_ASYNC_UNSAFE`` is set: a few of Django's ``async`` tests call the
  synchronous ``get_result()`` / ``refresh()``, harmless with an in-memory backend; the
  ORM refuses that in an event loop (an application calls ``aget_result()`` there).
* A private redis-server for the session (never the one on 6379).
* Tests that cannot pass are skipped by name, each with its reason (see docs/tasks.md).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

ON_COMMIT = ("enqueue() inside a transaction reaches Redis when it commits: a worker "
             "cannot run the task before")
SKIPPED = {
    "test_immediate_backend.py::ImmediateBackendTestCase::test_throws_keyboard_interrupt":
        "a KeyboardInterrupt raised by a task is that task's failure in the worker; it "
        "never reaches the process that enqueued it",
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_get_result":
        "the DelayQ backend supports get_result(): results are audit rows",
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_refresh_result":
        "the DelayQ backend supports refresh(): results are audit rows",
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_pass_run_after":
        "the DelayQ backend supports run_after",
    "test_immediate_backend.py::ImmediateBackendTransactionTestCase::"
    "test_doesnt_wait_until_transaction_commit_by_default": ON_COMMIT,
    "test_dummy_backend.py::DummyBackendTestCase::test_refresh_result":
        "edits the dummy backend's in-memory result; DelayQ results are rows",
    "test_dummy_backend.py::DummyBackendTestCase::test_refresh_result_async":
        "edits the dummy backend's in-memory result; DelayQ results are rows",
}


def pytest_configure(config: pytest.Config) -> None:
    """Django is set up by now (pytest-django): put the DelayQ backends in place."""
    from django.tasks.backends import dummy, immediate
    from django.test import SimpleTestCase

    from tests.tasks_conformance.backends import Enqueued, RunAtOnce

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    dummy.DummyBackend = Enqueued  # type: ignore[misc]
    immediate.ImmediateBackend = RunAtOnce  # type: ignore[misc]
    SimpleTestCase.databases = {"default"}  # type: ignore[assignment]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for name, reason in SKIPPED.items():
            if item.nodeid.endswith(name):
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def _delayq_redis() -> Iterator[Any]:
    from django.conf import settings
    from django.test import override_settings

    from tests.redis_server import RedisServer, binaries

    server = RedisServer(binaries()[0]).start()
    changed = override_settings(DELAYQ={**settings.DELAYQ, "REDIS_URL": server.url,
                                        "PREFIX": "conformance%s" % uuid.uuid4().hex[:6]})
    changed.enable()
    yield server
    changed.disable()
    server.cleanup()
