"""Settings of the worker subprocesses of tests/worker/test_runtime_limits.py: the test
settings with callable limits on two functions of tests.jobs_more."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import DELAYQ as _BASE

RATE = 20  # starts per second of tests.jobs_more.stamp
CONCURRENCY = 2  # tests.jobs_more.hold running at once

DELAYQ = {**_BASE, "CALLABLE_LIMITS": {
    "tests.jobs_more.stamp": {"rate_limit": "%d/s" % RATE},
    "tests.jobs_more.hold": {"concurrency": CONCURRENCY},
}}
