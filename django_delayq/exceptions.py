"""One error tree for django-delayq. Imports nothing from Django.

Some classes here are never raised: ``LeaseLost``, ``JobTimeout``, ``InvalidRow`` and
``WorkerLost`` (and, outside eager mode, ``ResultTooLarge``) name failures the worker or
the reconciler records on its own (an attempt cannot raise in a thread that is dead, hung
or never started). Their dotted path is the ``error_type`` of those attempts, so every
failed attempt has an exception class path, as Django's Tasks framework expects of its
``TaskError``.
"""

from __future__ import annotations


class DelayQError(Exception):
    """Base class of every error raised by django-delayq."""


# ``cancel()``'s error on SQLite when the job's row stays locked past the busy timeout: a
# running atomic job holds the database's write lock to its end (docs/guarantees.md).
CANCEL_LOCKED = (
    "cancel of job %s not recorded: the SQLite database stayed locked past its busy timeout "
    "(a running atomic job holds its write lock to its end). Redis took the cancel: a running "
    "job runs to its end and is not retried, and is not killed under --processes; a waiting "
    "job is cancelled by calling cancel() again once the lock is free")


class InvalidJob(DelayQError, ValueError):
    """``schedule()`` was given something it cannot turn into a job.

    The message names the bad value and says what would be accepted; ``option``: the name
    of the option at fault, where a check of one option raised it (else ``None``).
    """

    def __init__(self, *args: object, option: str | None = None) -> None:
        super().__init__(*args)
        self.option = option


class JobNotFound(DelayQError, LookupError):
    """No job with that id exists (in the audit table or in Redis)."""


class JobNotFinished(DelayQError):
    """``JobHandle.result`` of a job that has not ended yet (``status`` says where it is)."""

    def __init__(self, job_id: str, status: str) -> None:
        self.job_id, self.status = job_id, status
        super().__init__("job %s has not finished: it is %s; JobHandle.wait() blocks until it "
                         "has" % (job_id, status))


class JobFailed(DelayQError):
    """The result of a job that ended without succeeding: ``status`` is ``dead`` (with the
    last attempt's ``error_type`` and ``error``), ``cancelled`` or ``expired``."""

    def __init__(self, job_id: str, status: str, error_type: str = "", error: str = "") -> None:
        self.job_id, self.status = job_id, status
        self.error_type, self.error = error_type, error
        why = "%s: %s" % (error_type, error) if error_type else error
        super().__init__("job %s ended %s%s" % (job_id, status, ": " + why if why else ""))


class WaitTimeout(DelayQError, TimeoutError):
    """``JobHandle.wait(timeout=...)`` gave up: the job was not final after ``timeout``."""

    def __init__(self, job_id: str, timeout: float, status: str) -> None:
        self.job_id, self.timeout, self.status = job_id, timeout, status
        super().__init__("job %s is still %s after waiting %gs for it" % (job_id, status, timeout))


class NotInJob(DelayQError, RuntimeError):
    """``report_progress()`` was called outside a running job."""


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


class ResultTooLarge(DelayQError, ValueError):
    """A job returned a value over ``DELAYQ['MAX_PAYLOAD_BYTES']`` as JSON (UTF-8 bytes).

    The attempt fails with this class's path as its ``error_type`` and the job ends
    ``dead`` without a retry (the same value would be as large again); the value is not
    kept. A worker records it; eager mode (``DELAYQ["EAGER"]``) raises it.
    """


class WorkerLost(DelayQError):
    """A job ended dead in Redis but the worker stopped before recording its error.

    Never raised: its path is the ``error_type`` the reconciler records on that row.
    """


class Refused(PermissionError):
    """A job the worker refuses to run: a path the allow-list refuses
    (``core.registry.NotAllowed``), a callback URL ``post_json`` refuses
    (``contrib.http.CallbackRefused``). It ends dead at once, not retried, with
    ``not allowed: …`` in its audit row; any other ``PermissionError`` is a failure
    like the rest."""


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
