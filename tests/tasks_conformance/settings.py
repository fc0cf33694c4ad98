"""Settings of the conformance run: the test settings, with Django's test tasks allowed.

Django's tests name their task module ``tasks.tasks`` and their queues ``queue_1`` and
``queue-1``; the worker needs those queues in ``DELAYQ["QUEUES"]`` to run them.
"""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import DELAYQ

DELAYQ = {**DELAYQ, "QUEUES": ["default", "queue_1", "queue-1"],
          "ALLOWED_CALLABLES": ["tasks.tasks"]}
TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQBackend"}}
