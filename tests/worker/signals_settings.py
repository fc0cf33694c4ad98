"""Settings of the worker subprocesses of tests/worker/test_group_signals.py: the tests'
settings, with the INFO lines of the supervisor and its worker processes in their log
(the tests wait on them)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import LOGGING as _BASE

LOGGING = {**_BASE, "root": {**_BASE["root"], "level": "INFO"}}
