"""Settings of bench/atomic_drain.py: the benchmark's (``bench_settings``) with the atomic
test jobs allowed (``tests.jobs_atomic``: one UPDATE and one INSERT per job)."""

from bench_settings import *  # noqa: F403
from bench_settings import DELAYQ as _BASE

DELAYQ = {**_BASE, "ALLOWED_CALLABLES": ["bench_jobs", "tests.jobs_atomic"]}
