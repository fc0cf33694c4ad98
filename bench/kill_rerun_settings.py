"""Settings of ``bench/kill_rerun.py``: the chaos run's, with the library's defaults for
the lease, the recovery and wake-up intervals and the reconciler (what is measured).
``KILL_RERUN_LEASE`` (seconds) overrides ``LEASE_SECONDS`` for a comparison."""

from __future__ import annotations

import os

from bench.chaos_settings import *  # noqa: F403
from bench.chaos_settings import DELAYQ as _CHAOS

_TUNED = ("LEASE_SECONDS", "RECOVER_INTERVAL_SECONDS", "WAKE_INTERVAL_SECONDS",
          "RECONCILE_INTERVAL_SECONDS", "RECONCILE_GRACE_SECONDS")
DELAYQ = {k: v for k, v in _CHAOS.items() if k not in _TUNED}
DELAYQ["ALLOWED_CALLABLES"] = ["tests.jobs_chaos", "bench.kill_rerun_jobs"]
if os.environ.get("KILL_RERUN_LEASE"):
    DELAYQ["LEASE_SECONDS"] = float(os.environ["KILL_RERUN_LEASE"])
