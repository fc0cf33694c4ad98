"""Settings of worker subprocesses started by the reliability tests."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import DELAYQ as _BASE

DELAYQ = {**_BASE, "ALLOWED_CALLABLES": ["tests.jobs", "tests.jobs_chaos"],
          "RECOVER_INTERVAL_SECONDS": 0.2}
