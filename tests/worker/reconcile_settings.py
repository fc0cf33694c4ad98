"""Settings of worker subprocesses whose reconciler must act within seconds: it enqueues a
live row missing from Redis (a child released in a transaction whose worker was killed
before the enqueue) after a 1 s grace, not the default 60 s (no tests here)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import DELAYQ as _BASE

DELAYQ = {**_BASE, "RECONCILE_GRACE_SECONDS": 1, "RECONCILE_INTERVAL_SECONDS": 0.5}
