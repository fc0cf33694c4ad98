"""Job functions used by the tests (the only allowed module in tests.settings)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from typing import Any

from django_delayq import Retry, current_job, schedule


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


def wait_then_work(path: str, tag: str, gate: str, seconds: float, spin: bool = False) -> None:
    """Run until the file ``gate`` exists (at most two minutes), then work ``seconds`` more
    (``spin``: CPU-bound, a pure Python loop; else asleep), then ``record`` the run."""
    deadline = time.monotonic() + 120
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    until = time.monotonic() + seconds
    while spin and time.monotonic() < until:
        sum(range(1000))
    time.sleep(max(0.0, until - time.monotonic()))
    record(path, tag)


def _ready_then_sleep(ready: Any) -> None:
    ready.set()
    time.sleep(60)


def fork_and_terminate(count: int, at_once: bool = False) -> list[int | None]:
    """Fork ``count`` children (``multiprocessing``, fork), SIGTERM each once it runs its
    own code (``at_once``: right after it started, maybe before), as ``Pool.terminate()``
    does: their exit codes (None: still running 20s on)."""
    context = multiprocessing.get_context("fork")
    ready = [context.Event() for _ in range(count)]
    children = [context.Process(target=_ready_then_sleep, args=(r,)) for r in ready]
    for child in children:
        child.start()
        if at_once:
            child.terminate()
    for child, r in zip(children, ready):
        if not at_once:
            r.wait(20)
            child.terminate()
    for child in children:
        child.join(20)
        if child.exitcode is None:
            child.kill()
    return [child.exitcode for child in children]


def echo_context() -> dict[str, Any]:
    ctx = current_job()
    assert ctx is not None
    return {"attempt": ctx.attempt, "queue": ctx.queue, "id": ctx.id}


def hold_the_gil() -> int:
    """One C call that holds the GIL for many minutes from the first line (a runaway
    computation): no other thread of its process runs until it returns."""
    return sum(range(10**12))


def _start_alone(path: str) -> Any:
    """Record a start as ``start-alone`` (``start-overlap`` when another copy runs at this
    moment: that copy holds the lock file ``path``.lock, released by the kernel when its
    process dies); returns the lock file, held until it is closed."""
    import fcntl

    lock = open(path + ".lock", "a")  # noqa: SIM115 - held until closed or the process dies
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        tag = "start-alone"
    except BlockingIOError:
        tag = "start-overlap"
    record(path, tag)
    return lock


def hold_the_gil_alone(path: str) -> int:
    """Record its start (``_start_alone``), then hold the GIL for many minutes in one C
    call."""
    lock = _start_alone(path)
    return sum(range(10**12)) + lock.fileno()


def sleep_alone(path: str, seconds: float) -> None:
    """Record its start (``_start_alone``), sleep ``seconds`` with the GIL free, then
    record ``end``."""
    lock = _start_alone(path)
    time.sleep(seconds)
    record(path, "end")
    lock.close()


# -- progress (tests/worker/test_progress.py, tests/core/test_results.py) --------------

def report_steps(total: int) -> int:
    """Report ``{"done": i, "total": total}`` for i = 1..total, as fast as it can."""
    from django_delayq import report_progress

    for i in range(1, total + 1):
        report_progress({"done": i, "total": total})
    return total


def report_for(seconds: float) -> dict[str, Any]:
    """Report an increasing count for ``seconds`` (its own clock), one report per ms or so;
    returns how many reports it made and the seconds from the first to the last."""
    from django_delayq import report_progress

    t0 = time.monotonic()
    n = 0
    while True:
        n += 1
        report_progress(n)
        elapsed = time.monotonic() - t0
        if elapsed >= seconds:
            return {"reports": n, "elapsed": elapsed}
        time.sleep(0.001)


def report_then_wait(value: Any, gate: str) -> Any:
    """Report ``value``, then run until the file ``gate`` exists (at most two minutes)."""
    from django_delayq import report_progress

    report_progress(value)
    deadline = time.monotonic() + 120
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return value


def report_then_change(size: int) -> None:
    """Report a dict twice (the second one is kept for later: throttled), then grow the
    same object past what a progress value may hold and put a non-JSON value in it."""
    from django_delayq import report_progress

    value: dict[str, Any] = {"step": 1}
    report_progress(value)
    value["step"] = 2
    report_progress(value)
    value["step"] = 3
    value["junk"] = "x" * size
    value["handle"] = object()


def report_in_transaction() -> None:
    """Report progress inside a transaction of the job's own, which then rolls back."""
    from django.db import transaction

    from django_delayq import report_progress

    try:
        with transaction.atomic():
            report_progress({"in": "transaction"})
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass


def report_twice(first: Any, second: Any, fail: bool = False) -> Any:
    """Report ``first``, then ``second`` from a thread of the job's own (joined, run in
    a copy of the job's context), then return ``second``, or raise ``ValueError`` with
    ``fail``."""
    import contextvars
    import threading

    from django_delayq import report_progress

    report_progress(first)
    thread = threading.Thread(target=contextvars.copy_context().run,
                              args=(report_progress, second))
    thread.start()
    thread.join()
    if fail:
        raise ValueError("failed after reporting %r" % (second,))
    return second


def report_bad_progress() -> None:
    from django_delayq import report_progress

    report_progress({"handle": object()})


async def report_steps_async(total: int) -> int:
    from django_delayq import report_progress

    for i in range(1, total + 1):
        report_progress(i)
    return total


def countdown(n: int) -> int:
    """A job that schedules itself with ``n - 1`` until ``n`` is 0 (jobs scheduled by jobs)."""
    if n > 0:
        schedule("tests.jobs.countdown", n - 1)
    return n
