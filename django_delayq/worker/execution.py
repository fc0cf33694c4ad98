"""Calling a job function: sync or ``async def``, with the job context set."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from typing import Any

from django_delayq.core import context, progress, registry

_local = threading.local()


def _loop() -> asyncio.AbstractEventLoop:
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = _local.loop = asyncio.new_event_loop()
    return loop


def call(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        return _loop().run_until_complete(result)
    return result


def run(path: str, args: list[Any], kwargs: dict[str, Any], ctx: context.JobContext) -> Any:
    """Resolve ``path`` through the allow-list and call it inside the job context
    (``current_job()``, ``report_progress()``: its last value is written before this
    returns, so before the worker settles the attempt)."""
    fn = registry.resolve(path)
    with progress.running(ctx):
        return call(fn, args, kwargs)
