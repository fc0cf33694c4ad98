"""Settings for Spark executors in the tests: ``tests.settings`` on the test database.

The session fixture in ``conftest.py`` exports these variables before the JVM starts,
so every executor process inherits them: the test database (a file shared with the
driver), the private redis-server, and a key prefix of this test session.
"""

from __future__ import annotations

import copy
import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES as _DATABASES
from tests.settings import DELAYQ as _DELAYQ

DATABASES = copy.deepcopy(_DATABASES)
DATABASES["default"]["NAME"] = os.environ["DELAYQ_SPARK_TEST_DBNAME"]
DELAYQ = {**_DELAYQ, "REDIS_URL": os.environ["DELAYQ_REDIS_URL"],
          "PREFIX": os.environ["DELAYQ_SPARK_TEST_PREFIX"]}
