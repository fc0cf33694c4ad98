"""Job functions of tests/worker/test_kill_touches_no_other.py (allow-listed by
tests/worker/kill_settings.py): each run is recorded in ``chaos_exec``
(``tests/jobs_chaos.py``)."""

from __future__ import annotations

import time

from tests import jobs_chaos


def sleep_then_raise(seconds: float, tag: str = "") -> None:
    """Record the run, take ``seconds``, then fail (``ValueError``)."""
    jobs_chaos.record(tag)
    time.sleep(seconds)
    raise ValueError("%s failed after %gs" % (tag, seconds))
