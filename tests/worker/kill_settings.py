"""Settings of the worker subprocesses of tests/worker/test_kill_touches_no_other.py: the
reliability tests' settings, tests/worker/kill_jobs.py allowed too, and an audit writer
that flushes once a second (a kill before its flush would lose the rows it holds)."""

from __future__ import annotations

from tests.reliability.worker_settings import *  # noqa: F403
from tests.reliability.worker_settings import DELAYQ as _BASE

JOBS = "tests.worker.kill_jobs"

DELAYQ = {**_BASE, "ALLOWED_CALLABLES": [*_BASE["ALLOWED_CALLABLES"], JOBS],
          "AUDIT_FLUSH_SECONDS": 1.0}
