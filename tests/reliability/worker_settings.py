"""Settings of worker subprocesses started by the reliability tests."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import DELAYQ as _BASE

# tests.jobs_attack is listed so that tests/security sees its bait refused by the path
# rules, not by the list.
DELAYQ = {**_BASE, "ALLOWED_CALLABLES": ["tests.jobs", "tests.jobs_chaos", "tests.jobs_attack"],
          "RECOVER_INTERVAL_SECONDS": 0.2}
