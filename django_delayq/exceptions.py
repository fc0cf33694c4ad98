"""One error tree for django-delayq. Imports nothing from Django."""

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
    """A worker tried to settle a job whose lease it no longer holds."""


class QueueUnavailable(DelayQError):
    """Redis could not be reached; raised ``from`` the redis-py error."""


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
