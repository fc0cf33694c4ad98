"""A Django ``@task`` whose function is atomic (``@atomic_job``): the Tasks backend's jobs
of it are atomic. Import it only with ``TASKS["default"]`` set to ``DelayQBackend``."""

from __future__ import annotations

from django_delayq import atomic_job
from django_delayq.compat import tasks
from tests.jobs_atomic import bump

assert tasks is not None, "needs django.tasks (Django 6) or the django-tasks backport"


@tasks.task
@atomic_job
def credit(counter: str) -> str:
    return bump(counter)


@atomic_job
@tasks.task
def debit(counter: str) -> str:
    return bump(counter)
