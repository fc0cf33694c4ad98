"""The send to Redis of committed jobs: inline (the default), or from a per-process
background thread, so that ``schedule()`` returns without waiting for a Redis round trip.

``send(queue, jobs)`` is the one send of committed jobs (``commit_batch`` calls it at
commit; ``api.enqueue_or_outbox``, the same function, serves Spark's sink). Inline, it
sends them before it returns (``schedule()`` in autocommit returns with its job in
Redis). In the background (``use_background(True)``), it appends them to a buffer (no
I/O) and wakes the sender's thread when the buffer was empty. The
thread takes everything the buffer holds and sends it, one ``Engine.enqueue`` per engine
and queue (split by the engine into script calls of ``scripts.MAX_ENQUEUE``): an idle
sender sends a job at once, a busy one sends what accumulated during its last send in
one call. The engine is the one in effect when the job was given (settings and test
clocks may change after).

**Invariant: a job whose row committed reaches Redis, or the reconciler brings it
there.** The row is durable before ``give``; a send that fails (Redis down) is logged
and its rows wait for the reconciler (the row is the outbox); a process that dies
before sending leaves the same rows. ``flush()`` waits until every job given before it
was sent (or left to the reconciler): code that reads Redis for jobs
this process just scheduled calls it first (the process's exit does). The background is
not the default because every reader in the process would need that call: an in-process
burst worker, ``cancel()`` and ``reschedule()`` right after ``schedule()``, the test
helpers that read Redis, the metrics of queue depths. In a forked child the buffer starts empty
(its jobs are the parent's to send) with a thread of its own.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any

from redis.exceptions import RedisError

from django_delayq.core.connection import get_engine
from django_delayq.engine import NewJob

logger = logging.getLogger(__name__)

EXIT_FLUSH_SECONDS = 5.0  # how long the process's exit waits for unsent jobs


class Sender:
    """A buffer of committed jobs by (engine, queue) and the daemon thread sending it."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._done_cond = threading.Condition(self._lock)
        self._jobs: dict[tuple[int, str], tuple[Any, list[NewJob]]] = {}  # by engine's id
        self._given = 0  # jobs given, ever
        self._done = 0  # jobs whose send ended (sent, or left to the reconciler)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def give(self, engine: Any, queue: str, jobs: list[NewJob]) -> None:
        """Send ``jobs`` (their rows committed) to ``engine`` soon; O(1), no I/O."""
        with self._lock:
            was_empty = not self._jobs
            queued = self._jobs.get((id(engine), queue))
            if queued is None:
                self._jobs[(id(engine), queue)] = (engine, list(jobs))
            else:
                queued[1].extend(jobs)
            self._given += len(jobs)
        if self._thread is None:
            self._start()
        if was_empty:
            self._wake.set()

    def unsent(self) -> int:
        """Jobs given and not yet sent (nor left to the reconciler)."""
        return self._given - self._done

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the jobs given before this call were sent (or left to the
        reconciler); False if ``timeout`` seconds passed first."""
        if self._given == self._done or threading.current_thread() is self._thread:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._done_cond:
            target = self._given
            while self._done < target:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._done_cond.wait(left)
        return True

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="delayq-sender", daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                batch, self._jobs = self._jobs, {}
            try:
                for (_, queue), (engine, jobs) in batch.items():
                    try:  # each queue on its own: one failing costs the others nothing
                        _send(engine, queue, jobs)
                    except Exception:  # noqa: BLE001 - the sender must survive anything
                        logger.exception("sending %d job(s) of queue %r to Redis failed; "
                                         "the reconciler enqueues them", len(jobs), queue)
            finally:
                with self._done_cond:
                    self._done += sum(len(jobs) for _, jobs in batch.values())
                    self._done_cond.notify_all()

    def after_fork(self) -> None:
        """In a forked child: the parent's buffer is the parent's to send, its thread and
        locks did not come along."""
        self._reset()


def _send(engine: Any, queue: str, jobs: list[NewJob]) -> None:
    try:
        engine.enqueue(queue, jobs)
    except RedisError as exc:
        _left_to_reconciler(queue, jobs, exc)


def _left_to_reconciler(queue: str, jobs: list[NewJob], exc: Exception) -> None:
    logger.warning("Redis unavailable; %d job(s) of queue %r stay in the outbox for the "
                   "reconciler: %s", len(jobs), queue, exc)


_sender = Sender()
_background = [False]


def use_background(on: bool) -> None:
    """Send committed jobs from this process's background thread (``True``) or inline
    (``False``, the default); switching to inline first sends what is buffered."""
    _background[0] = bool(on)
    if not on:
        _sender.flush()


def send(queue: str, jobs: list[NewJob]) -> None:
    """Send committed jobs to Redis (the engine of the current settings): inline, or
    through the background thread."""
    try:
        engine = get_engine()  # a cluster client connects when it is made
    except RedisError as exc:
        _left_to_reconciler(queue, jobs, exc)
        return
    if _background[0]:
        _sender.give(engine, queue, jobs)
        return
    try:
        _send(engine, queue, jobs)
    except Exception:  # noqa: BLE001 - the rows are committed: never fail the caller
        logger.exception("sending %d job(s) of queue %r to Redis failed; the reconciler "
                         "enqueues them", len(jobs), queue)


def flush(timeout: float | None = None) -> bool:
    """Wait until this process's sender has sent every job given so far (see
    ``Sender.flush``): call it before reading Redis for jobs this process scheduled."""
    return _sender.flush(timeout)


def unsent() -> int:
    return _sender.unsent()


def _flush_at_exit() -> None:
    try:
        if not _sender.flush(EXIT_FLUSH_SECONDS):
            logger.warning("%d job(s) not sent to Redis at exit; the reconciler enqueues "
                           "them", _sender.unsent())
    except Exception:  # noqa: BLE001 - interpreter shutdown
        pass


os.register_at_fork(after_in_child=_sender.after_fork)
atexit.register(_flush_at_exit)
