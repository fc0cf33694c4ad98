"""Job functions of tests/worker/test_kill_touches_no_other.py (allow-listed by
tests/worker/kill_settings.py): each run is recorded in ``chaos_exec``
(``tests/jobs_chaos.py``)."""

from __future__ import annotations

import time

from django_delayq import signals
from django_delayq.core.context import current_job
from django_delayq.exceptions import Retry
from tests import jobs_chaos


def sleep_then_raise(seconds: float, tag: str = "") -> None:
    """Record the run, take ``seconds``, then fail (``ValueError``)."""
    jobs_chaos.record(tag)
    time.sleep(seconds)
    raise ValueError("%s failed after %gs" % (tag, seconds))


def retry_at_once_then_hang(tag: str = "") -> None:
    """Attempt 1: record, take a second, ask to be retried at once; later attempts:
    record and run far past any time limit the test gives (the supervisor must kill it)."""
    jobs_chaos.record(tag)
    if current_job().attempt == 1:
        time.sleep(1.0)
        raise Retry(0)
    time.sleep(60)


def sleep(seconds: float, tag: str = "") -> None:
    jobs_chaos.record(tag)
    time.sleep(seconds)


def _slow_retry_receiver(sender: object, **kwargs: object) -> None:
    """Holds the settling thread after the first attempt of ``retry_at_once_then_hang``:
    its report of that attempt then reaches the supervisor after the next claim's."""
    if kwargs.get("callable_path") == __name__ + ".retry_at_once_then_hang":
        time.sleep(1.5)


signals.job_retrying.connect(_slow_retry_receiver, dispatch_uid="kill-jobs-slow-retry")
