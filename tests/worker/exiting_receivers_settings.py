"""Settings of the worker subprocess of tests/worker/test_receivers_that_exit.py: the
tests' settings, and receivers of ``job_started`` and ``job_succeeded`` that call
``sys.exit()`` (connected as the settings load: ``django_delayq.signals`` needs no app)."""

from __future__ import annotations

import sys
from typing import Any

from django_delayq import signals as _signals
from tests.settings import *  # noqa: F403


def _exit(**kwargs: Any) -> None:
    sys.exit(3)


_signals.job_started.connect(_exit, weak=False)
_signals.job_succeeded.connect(_exit, weak=False)
