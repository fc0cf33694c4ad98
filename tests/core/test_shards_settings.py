"""Settings of the worker subprocesses of tests/core/test_shards.py: the test settings
with queue ``emails`` spread over three shards (no tests here)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import DELAYQ as _BASE

SHARDS = 3
DELAYQ = {**_BASE, "QUEUE_OPTIONS": {"emails": {"shards": SHARDS}}}
