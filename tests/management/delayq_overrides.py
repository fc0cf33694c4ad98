"""Settings of the ``manage.py`` subprocesses of tests/management/test_worker_config_exit.py:
the test settings (with ``DELAYQ_TEST_LOGGING`` set, a project LOGGING entry for
``django_delayq``), with the DELAYQ keys of the JSON object in ``DELAYQ_TEST_OVERRIDES``
replaced (a ``null`` value sets the key to None), and with ``DELAYQ_TEST_TASK_OPTIONS`` the
Tasks backend's ``OPTIONS`` (JSON) in ``TASKS``."""

from __future__ import annotations

import importlib.util
import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import DELAYQ as _BASE

DELAYQ = {**_BASE, **json.loads(os.environ.get("DELAYQ_TEST_OVERRIDES", "{}"))}
if "DELAYQ_TEST_TASK_OPTIONS" in os.environ:  # a Tasks backend's OPTIONS, checked too
    TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQBackend",
                         "OPTIONS": json.loads(os.environ["DELAYQ_TEST_TASK_OPTIONS"])}}
    if importlib.util.find_spec("django_tasks"):  # Django 5.2: its checks run once installed
        INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks"]  # noqa: F405
if "DELAYQ_TEST_LOGGING" in os.environ:  # a project's LOGGING entry for the package's loggers
    LOGGING = {"version": 1, "disable_existing_loggers": False,
               "handlers": {"console": {"class": "logging.StreamHandler"}},
               "loggers": {"django_delayq": {"handlers": ["console"], "level": "INFO"}}}
