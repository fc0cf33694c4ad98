"""Job function of ``bench/kill_rerun.py`` (allowed by ``kill_rerun_settings``)."""

from __future__ import annotations

import time

from tests.jobs_chaos import record


def hold(seconds: float) -> None:
    """Record a start row, take ``seconds``, record an end row (``chaos_exec``): a
    killed execution has a start and no end."""
    record("start")
    time.sleep(seconds)
    record("end")
