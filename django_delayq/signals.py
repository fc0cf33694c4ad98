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
* ``jobs_scheduled`` (bulk: ``schedule_many``, ``schedule_dataframe``), once per batch:
  ``queue``, ``callable_path``, ``job_ids`` (list of the ids this batch scheduled)

A job whose worker died is recovered by another worker's housekeeping: its
``job_retrying`` / ``job_dead`` / ``job_cancelled`` is then sent with ``worker_id=""``,
``callable_path=""``, ``error_type="django_delayq.exceptions.LeaseLost"``, an
``error`` that starts with "lease expired" and the ``started_at`` the lost attempt's
worker wrote on the job's row (None when that write had not landed).

Worker-side signals are sent from the worker thread that ran the job, after Redis
has recorded the outcome. Receivers must be quick; exceptions in receivers are logged
and never affect the job (``send_robust``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from django.dispatch import Signal

logger = logging.getLogger(__name__)

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
    """``send_robust`` that costs nothing without receivers and logs receiver errors."""
    if not wanted(signal):
        return
    job = _job_model()
    for fn in _observers.get(signal, ()):
        try:
            fn(sender=job, **kwargs)
        except Exception as exc:  # noqa: BLE001 - like send_robust: never affect the job
            logger.error("signal receiver %r failed: %s", fn, exc, exc_info=exc)
    # without receivers send_robust returns at once, before any call
    for receiver, result in signal.send_robust(sender=job, **kwargs):
        if isinstance(result, Exception):
            logger.error("signal receiver %r failed: %s", receiver, result, exc_info=result)
