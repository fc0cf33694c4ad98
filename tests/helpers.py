"""Helpers shared by the test packages: waiting on a condition, pointing the settings at a
private Redis, running a real worker in this process.

Tests wait on conditions, never for a fixed time: ``wait_until`` polls a predicate and
fails with a clear message when it stays false past its (generous) timeout.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tests.conftest import unique_prefix

if TYPE_CHECKING:
    from tests.redis_server import RedisServer

# The allow-list of the real worker subprocesses (tests/reliability/worker_settings.py).
ALLOWED = ["tests.jobs", "tests.jobs_chaos", "tests.jobs_attack"]


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0,
               step: float | None = None) -> None:
    """Return once ``predicate()`` is true; AssertionError after ``timeout`` seconds.
    Polled every ``step`` seconds; by default every 0.02 s for the first second, then every
    0.05 s: the waits on worker processes last seconds, and their predicates (queries,
    logs read) took 3-6 ms of CPU a poll, a fifth of a core polled 50 times a second."""
    started = time.monotonic()
    deadline = started + timeout
    while not predicate():
        now = time.monotonic()
        if now > deadline:
            raise AssertionError("condition not met within %.1fs" % timeout)
        time.sleep(step if step is not None else 0.02 if now - started < 1.0 else 0.05)


def point_at(settings, server: RedisServer, **extra) -> None:  # type: ignore[no-untyped-def]
    """Point DELAYQ at ``server`` under a fresh prefix, with the worker subprocesses'
    allow-list; ``extra`` overrides any setting."""
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": server.url, "PREFIX": unique_prefix(),
                       "ALLOWED_CALLABLES": ALLOWED, **extra}


def burst(queues: tuple[str, ...] = ("default",), concurrency: int = 2) -> int:
    """A real Worker in this process, in burst mode: runs what is due, returns its exit code."""
    from django_delayq.core.conf import get_settings
    from django_delayq.core.connection import get_engine
    from django_delayq.worker.loop import Worker, WorkerOptions

    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=queues, concurrency=concurrency, burst=True))
    return worker.run()


def staff_client(*codenames: str) -> Any:
    """A logged-in admin client for a staff user who may view jobs plus ``codenames``
    (permissions of the django_delayq app, e.g. "cancel_job", "view_report")."""
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="django_delayq", codename__in=("view_job", *codenames)))
    client = Client()
    client.force_login(user)
    return client


@contextlib.contextmanager
def connected(receivers: dict[Any, Callable[..., Any]]) -> Iterator[None]:
    """Each signal of ``receivers`` connected to its receiver (strongly) while in the block."""
    for signal, receiver in receivers.items():
        signal.connect(receiver, weak=False)
    try:
        yield
    finally:
        for signal, receiver in receivers.items():
            signal.disconnect(receiver)


@contextlib.contextmanager
def signals_sent(*names: str) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """The ``django_delayq.signals`` named, as sent while in the block, in order: (name,
    the receiver's arguments: ``sender`` and ``signal`` too)."""
    from django_delayq import signals

    log: list[tuple[str, dict[str, Any]]] = []

    def receiver_of(name: str) -> Callable[..., None]:
        def receiver(**kwargs: Any) -> None:
            log.append((name, kwargs))
        return receiver
    with connected({getattr(signals, name): receiver_of(name) for name in names}):
        yield log


class RolledBack(Exception):
    """Raised inside ``transaction.atomic()`` to roll it back."""


def score_ms(job_id: str, queue: str = "default") -> int:
    """The due time (ms) Redis holds job ``job_id`` at; it must hold it."""
    from django_delayq.core.connection import get_engine

    score = get_engine().inspect(queue, job_id).score_ms
    assert score is not None, job_id
    return score
