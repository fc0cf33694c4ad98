"""Job functions and ``@task`` definitions for the Tasks backend, signals, HTTP and
metrics tests. Import it only with ``TASKS["default"]`` set to ``DelayQBackend`` (the
decorators validate against the backend at import time)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from django_delayq import cancel, current_job
from django_delayq.compat import tasks

assert tasks is not None, "needs django.tasks (Django 6) or the django-tasks backport"
task = tasks.task


class CustomError(Exception):
    pass


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def fail(message: str) -> None:
    raise CustomError(message)


@task(takes_context=True)
def flaky(context: Any, succeed_on: int) -> dict[str, Any]:
    """Fails until attempt ``succeed_on``; returns what its context said."""
    if context.attempt < succeed_on:
        raise ValueError("attempt %d fails" % context.attempt)
    result = context.task_result
    return {"attempt": context.attempt, "worker_ids": list(result.worker_ids),
            "id": result.id, "errors": len(result.errors), "status": str(result.status)}


@task(takes_context=True)
def lost_first(context: Any, directory: str, seconds: float) -> dict[str, Any]:
    """Attempt 1 notes its start (the file ``started``) and takes ``seconds`` (its worker
    is killed meanwhile); a later attempt returns what its context said."""
    if context.attempt == 1:
        with open(os.path.join(directory, "started"), "a") as out:
            out.write("%s\n" % context.task_result.id)
        time.sleep(seconds)
    result = context.task_result
    return {"attempt": context.attempt, "worker_ids": list(result.worker_ids),
            "errors": [e.exception_class_path for e in result.errors],
            "started_at": result.started_at.isoformat(),
            "last_attempted_at": result.last_attempted_at.isoformat()}


@task
async def async_mul(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a * b


@task(queue_name="emails")
def on_emails(value: Any) -> Any:
    return value


@task
def takes_key(key: str) -> str:
    return key


@task
def named_like_options(fn: Any, delay: Any, at: Any, queue: Any, max_attempts: Any,
                       backoff: Any, key: Any) -> list[Any]:
    """Keyword arguments named like schedule()'s options reach the function."""
    return [fn, delay, at, queue, max_attempts, backoff, key]


@task
def returns_object() -> Any:
    return object()  # not JSON: the task fails with a TypeError


def cancel_self() -> None:
    """A plain job that cancels itself while running, then fails."""
    ctx = current_job()
    assert ctx is not None
    cancel(ctx.id)
    raise RuntimeError("cancelled myself")


def now_iso() -> str:
    """The time a job sees (freezegun tests)."""
    from django.utils import timezone

    return timezone.now().isoformat()


@task(takes_context=True)
def starts(context: Any) -> dict[str, str]:
    """Attempt 1 fails with its context's start (first and latest) as the message; attempt
    2 returns them."""
    result = context.task_result
    seen = {"started_at": result.started_at.isoformat(),
            "last_attempted_at": result.last_attempted_at.isoformat()}
    if context.attempt == 1:
        raise ValueError("%(started_at)s %(last_attempted_at)s" % seen)
    return seen
