"""``bench_settings`` plus the job module of ``bench/runtime.py``."""

from bench_settings import *  # noqa: F403

DELAYQ = {**DELAYQ, "ALLOWED_CALLABLES": ["bench_jobs", "runtime_jobs"]}  # noqa: F405
