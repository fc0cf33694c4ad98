"""One error tree for django-delayq. Imports nothing from Django.

Some classes here are never raised: ``LeaseLost``, ``JobTimeout``, ``InvalidRow`` and
``WorkerLost`` name failures the worker or the reconciler records on its own (an attempt
cannot raise in a thread that is dead, hung or never started). Their dotted path is the
``error_type`` of those attempts, so every failed attempt has an exception class path,
as Django's Tasks framework expects of its ``TaskError``.
"""

from __future__ import annotations


class DelayQError(Exception):
    """Base class of every error raised by django-delayq."""


class InvalidJob(DelayQError, ValueError):
    """``schedule()`` was given something it cannot turn into a job.

    The message names the bad value and says what would be accepted.
    """


class JobNotFound(DelayQError, LookupError):
    """No job with that id exists (in the audit table or in Redis)."""


class LeaseLost(DelayQError):
    """The lease of a running job expired before its worker settled it (the worker died,
    hung or stopped heartbeating) and the job was taken back.

    Never raised: its path is the ``error_type`` recorded for that attempt.
    """


class JobTimeout(DelayQError):
    """An attempt was still running after ``DELAYQ['JOB_TIMEOUT_SECONDS']``.

    Never raised (a thread cannot be interrupted): its path is the ``error_type``
    recorded for that attempt.
    """


class InvalidRow(DelayQError, ValueError):
    """A claimed job's audit row cannot be run (missing, or a payload of the wrong shape).

    Never raised: its path is the ``error_type`` of the job's dead attempt.
    """


class WorkerLost(DelayQError):
    """A job ended dead in Redis but the worker stopped before recording its error.

    Never raised: its path is the ``error_type`` the reconciler records on that row.
    """


class Retry(Exception):
    """Raise from a job function to ask for another attempt.

    ``delay`` (seconds or ``timedelta``) overrides the job's backoff for this
    retry; ``None`` uses the backoff policy. The retry counts as an attempt, so
    a job that asks for more retries than ``max_attempts`` allows ends ``dead``.
    """

    def __init__(self, delay: float | object | None = None, reason: str = "") -> None:
        self.delay = delay
        self.reason = reason
        super().__init__(reason or "retry requested")


def type_path(kind: type[BaseException]) -> str:
    """The dotted path of an exception class: ``builtins.ValueError``,
    ``django_delayq.exceptions.LeaseLost``."""
    return "%s.%s" % (kind.__module__, kind.__qualname__)
