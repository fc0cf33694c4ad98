"""django-delayq settings for the comparison: ``bench/bench_settings.py`` (private Redis
from DELAYQ_REDIS_URL, SQLite in BENCH_DIR, audit rows on) plus the recording job."""

import os

from bench_settings import *  # noqa: F403
from bench_settings import DELAYQ

DELAYQ = {**DELAYQ, "ALLOWED_CALLABLES": ["bench_jobs", "delayq_jobs"]}

if os.environ.get("BENCH_EVENTS") == "0":  # experiment: no event stream (default is on)
    DELAYQ["EVENTS"] = False
