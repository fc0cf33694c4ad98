"""Settings of bench/atomic_chaos.py and of its worker subprocesses: the chaos run's
(``chaos_settings``, no periodic schedule), with the atomic jobs allowed and a short lease
so that a SIGKILLed worker's jobs run again within seconds."""

from __future__ import annotations

import os

from bench.chaos_settings import *  # noqa: F403
from bench.chaos_settings import DELAYQ as _BASE

DELAYQ = {**_BASE, "ALLOWED_CALLABLES": ["tests.jobs_atomic"],
          "LEASE_SECONDS": float(os.environ.get("CHAOS_LEASE") or 2.0),
          "RECOVER_INTERVAL_SECONDS": 0.2, "RECONCILE_INTERVAL_SECONDS": 0.5,
          "RECONCILE_GRACE_SECONDS": 1.0}
DELAYQ.pop("SCHEDULES", None)
