"""Settings of the ``manage.py`` subprocesses of tests/management/test_worker_config_exit.py:
the test settings, with the DELAYQ keys of the JSON object in ``DELAYQ_TEST_OVERRIDES``
replaced (a ``null`` value sets the key to None)."""

from __future__ import annotations

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import DELAYQ as _BASE

DELAYQ = {**_BASE, **json.loads(os.environ.get("DELAYQ_TEST_OVERRIDES", "{}"))}
