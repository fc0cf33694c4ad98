"""Job functions used by the tests (the only allowed module in tests.settings)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from django_delayq import Retry, current_job


def noop(*args: Any, **kwargs: Any) -> None:
    return None


def add(a: int, b: int) -> int:
    return a + b


async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


def boom(message: str = "boom") -> None:
    raise RuntimeError(message)


def ask_retry(seconds: float) -> None:
    ctx = current_job()
    if ctx is not None and ctx.attempt < 2:
        raise Retry(delay=seconds)


def record(path: str, tag: str) -> None:
    """Append one line per execution to ``path`` (how subprocess tests see runs)."""
    ctx = current_job()
    with open(path, "a") as f:
        f.write("%s %s %d %d\n" % (tag, ctx.id if ctx else "-", ctx.attempt if ctx else 0,
                                   os.getpid()))


def sleep_then_record(path: str, tag: str, seconds: float) -> None:
    time.sleep(seconds)
    record(path, tag)


def echo_context() -> dict[str, Any]:
    ctx = current_job()
    assert ctx is not None
    return {"attempt": ctx.attempt, "queue": ctx.queue, "id": ctx.id}


def hold_the_gil() -> int:
    """One C call that holds the GIL for many minutes from the first line (a runaway
    computation): no other thread of its process runs until it returns."""
    return sum(range(10**12))
