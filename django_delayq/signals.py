"""Job lifecycle signals. Every one is sent with ``sender=Job`` (the model class) and:

* ``job_id`` (str), ``queue`` (str), ``callable_path`` (str)
* ``job_scheduled``: ``run_at`` (aware datetime)
* ``job_started``: ``attempt`` (int), ``worker_id`` (str), ``due_at``, ``started_at``
  (aware datetimes; lateness = started_at - due_at)
* ``job_succeeded``: ``attempt``, ``worker_id``, ``result`` (JSON value or None), ``duration`` (s)
* ``job_retrying``: ``attempt``, ``worker_id``, ``error`` (str: the message), ``error_type``
  (str: the exception's dotted path), ``started_at`` (aware datetime: the failed attempt's
  start, or None when unknown), ``retry_at`` (aware datetime)
* ``job_dead``: ``attempt``, ``worker_id``, ``error``, ``error_type``, ``started_at``
* ``job_cancelled``: ``running`` (bool: the job was running and only its retries were cancelled)
* ``job_expired``: ``attempts`` (int: the attempts that ran before), ``worker_id``,
  ``due_at``, ``expires_at`` (aware datetimes)
* ``jobs_scheduled`` (bulk: ``schedule_many``, ``schedule_dataframe``), once per batch:
  ``queue``, ``callable_path``, ``job_ids`` (list of the ids this batch scheduled)

A job whose worker died is recovered by another worker's housekeeping: its
``job_retrying`` / ``job_dead`` / ``job_cancelled`` is then sent with ``worker_id=""``,
``callable_path=""``, ``error_type="django_delayq.exceptions.LeaseLost"``, an
``error`` that starts with "lease expired" and the ``started_at`` the lost attempt's
worker wrote on the job's row (None when that write had not landed).

Worker-side signals come from the worker's threads: ``job_started`` from the thread
that runs the job (``delayq-exec-N``), just before it runs; an attempt's end from the
thread that settles it (``delayq-acks`` for a success or an expiry, ``delayq-settle``
otherwise), after
Redis recorded the outcome; a recovered job's from the main loop, the reconciler's from
``delayq-keeper``. Receivers must be quick; an ``Exception`` or ``SystemExit`` a receiver
raises is logged and never affects the job or the worker (``send``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from django.dispatch import Signal

logger = logging.getLogger(__name__)
_dispatch_logger = logging.getLogger("django.dispatch")  # Django's own reports

job_scheduled = Signal(use_caching=True)
job_started = Signal(use_caching=True)
job_succeeded = Signal(use_caching=True)
job_retrying = Signal(use_caching=True)
job_dead = Signal(use_caching=True)
job_cancelled = Signal(use_caching=True)
job_expired = Signal(use_caching=True)  # not started before its expires_at: never run
jobs_scheduled = Signal(use_caching=True)  # schedule_many / schedule_dataframe: per batch


# django-delayq's own receivers (metrics, the event stream) are plain calls: a worker
# sends two signals per job, and Django's dispatch costs more than their work.
_observers: dict[Signal, tuple[Callable[..., None], ...]] = {}


def observe(signal: Signal, fn: Callable[..., None]) -> None:
    """Call ``fn(sender=Job, **kwargs)`` on every ``signal``, before Django's receivers,
    errors logged (internal: metrics and events); idempotent."""
    current = _observers.get(signal, ())
    if fn not in current:
        _observers[signal] = current + (fn,)


def unobserve(signal: Signal, fn: Callable[..., None]) -> None:
    _observers[signal] = tuple(f for f in _observers.get(signal, ()) if f is not fn)


def wanted(signal: Signal) -> bool:
    """Whether sending ``signal`` reaches anyone (skip building its arguments if not)."""
    return bool(_observers.get(signal) or signal.receivers)


@functools.cache
def _job_model() -> type:
    """The sender of every signal, looked up once (a worker sends two signals a job)."""
    from django_delayq.models import Job  # lazy: models need the app registry, not ready here

    return Job


def send(signal: Signal, **kwargs: object) -> None:
    """``send_robust`` that costs nothing without receivers and logs receiver errors: an
    ``Exception`` or ``SystemExit`` (``sys.exit()`` in a receiver would else end the worker
    thread sending it, silently), and the next receivers are called all the same. Django's
    receivers are called as ``send_robust`` calls them (``_live_receivers``: the sync ones
    in order, then the async ones gathered), and a failing one is also reported on
    Django's ``django.dispatch`` logger, as ``send_robust`` reports it."""
    if not wanted(signal):
        return
    job = _job_model()
    named: dict[str, Any] = {"sender": job, **kwargs}
    for fn in _observers.get(signal, ()):
        _call(fn, named, ours=True)
    if not signal.receivers:  # the usual case: none of Django's
        return
    try:  # Django 5.0 to 6.1 (checked by the tests): (sync, async)
        sync, later = signal._live_receivers(job)
    except (AttributeError, TypeError, ValueError):  # another shape: Django's own call
        for fn, result in signal.send_robust(**named):
            if isinstance(result, Exception):
                _failed(fn, result, ours=True)
        return
    named["signal"] = signal
    for receiver in sync:
        _call(receiver, named)
    if later:
        _call(async_to_sync(_gather), {"receivers": later, "named": named}, ours=True)


def _call(fn: Callable[..., object], kwargs: dict[str, Any], ours: bool = False) -> None:
    """``fn(**kwargs)``; an ``Exception`` or ``SystemExit`` it raises is logged, never
    raised (``ours``: not a Django receiver, not reported on ``django.dispatch``). Other
    ``BaseException``s go on: ``KeyboardInterrupt`` (Ctrl-C in a shell), a green thread's
    kill or a test runner's outcome are not a receiver's failure."""
    try:
        fn(**kwargs)
    except (Exception, SystemExit) as exc:  # never the job's, nor the worker thread's
        _failed(fn, exc, ours)


def _failed(fn: Callable[..., object], exc: BaseException, ours: bool = False) -> None:
    if not ours:  # as send_robust reports it
        _dispatch_logger.error("Error calling %s in Signal.send_robust() (%s)",
                               getattr(fn, "__qualname__", fn), exc, exc_info=exc)
    logger.error("signal receiver %r failed: %s", fn, exc, exc_info=exc)


async def _gather(receivers: list[Callable[..., Any]], named: dict[str, Any]) -> None:
    """The async receivers, at once (as ``send_robust``); each one's ``Exception`` or
    ``SystemExit`` logged here, the others going on."""
    async def each(receiver: Callable[..., Any]) -> None:
        try:
            await receiver(**named)
        except (Exception, SystemExit) as exc:  # as _call
            _failed(receiver, exc)

    await asyncio.gather(*(each(r) for r in receivers))
