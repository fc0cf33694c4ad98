"""The only ImportError shims of django-delayq.

* Django's Tasks framework: ``django.tasks`` on Django 6.x, the ``django_tasks``
  backport (``pip install django-tasks``) on Django 5.2. ``tasks`` is ``None`` when
  neither is importable; the names below are then ``None`` too.
  ``normalize_json`` is its check that a value is JSON (``TypeError`` otherwise).
* ``prometheus_client`` (the ``prometheus`` extra), ``None`` when not installed.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from django.core.exceptions import ImproperlyConfigured

tasks: ModuleType | None
tasks_base: ModuleType | None
BaseTaskBackend: Any
InvalidTask: Any
TaskResultDoesNotExist: Any
task_signals: ModuleType | None
normalize_json: Any

try:  # Django 6.x
    from django import tasks
    from django.tasks import base as tasks_base
    from django.tasks import signals as task_signals
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.utils.json import normalize_json
except ImportError:
    try:  # Django 5.2 + the django-tasks backport
        import django_tasks as tasks
        from django_tasks import base as tasks_base
        from django_tasks import signals as task_signals
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.utils import normalize_json
    except ImportError:
        tasks = tasks_base = task_signals = None
        BaseTaskBackend = InvalidTask = TaskResultDoesNotExist = normalize_json = None

prometheus_client: ModuleType | None
try:
    import prometheus_client
except ImportError:
    prometheus_client = None


def require_tasks() -> ModuleType:
    """The Tasks module, or ``ImproperlyConfigured`` saying what to install."""
    if tasks is None:
        raise ImproperlyConfigured(
            "django_delayq.backends needs Django's Tasks framework: Django >= 6.0, or "
            "'pip install django-tasks' on Django 5.2")
    return tasks
