"""Settings of the worker subprocesses of tests/worker/test_naive_rows_process.py: the
test settings without ``USE_TZ``, in a time zone off UTC."""

from __future__ import annotations

from tests.settings import *  # noqa: F403

USE_TZ = False
TIME_ZONE = "Europe/Berlin"
