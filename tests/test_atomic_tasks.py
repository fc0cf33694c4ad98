"""Atomic jobs through the Django Tasks backend: a task whose function is marked with
``@atomic_job`` (above or below ``@task``) is enqueued atomic and commits its writes with
its success."""

from __future__ import annotations

import pytest

from django_delayq import compat
from django_delayq.models import Job, JobStatus
from tests import jobs_atomic
from tests.helpers import ALLOWED, burst

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(compat.tasks is None, reason="no Django Tasks framework")]


@pytest.fixture
def jt(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "ALLOWED_CALLABLES": [*ALLOWED, "tests.jobs_atomic_tasks"]}
    delayq_settings.TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQBackend"}}
    jobs_atomic.create_tables(["a"])
    from tests import jobs_atomic_tasks

    return jobs_atomic_tasks


def test_a_task_of_an_atomic_function_is_enqueued_atomic_and_runs_so(jt) -> None:  # type: ignore[no-untyped-def]
    ids = [jt.credit.enqueue("a").id, jt.debit.enqueue("a").id]
    assert list(Job.objects.filter(pk__in=ids).values_list("atomic", flat=True)) == [True, True]
    assert burst() == 0
    assert [Job.objects.get(pk=i).status for i in ids] == [JobStatus.SUCCEEDED] * 2
    assert jobs_atomic.counters() == {"a": 2} and set(jobs_atomic.effects()) == set(ids)
