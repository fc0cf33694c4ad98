"""The Tasks backend's queues and priorities as Django's Task takes them: a queue name
no worker can serve is refused when enqueued (``QUEUES: []``), a backend listing queues
``DELAYQ["QUEUES"]`` lacks is a ``manage.py check`` error, and a whole-number float
priority (which Django's Task accepts) is stored as its integer."""

from __future__ import annotations

import importlib.util
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_delayq import compat
from django_delayq.models import Job

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(compat.tasks is None, reason="no Django Tasks framework")]

BACKEND = "django_delayq.backends.DelayQBackend"


@pytest.fixture
def jt(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "ALLOWED_CALLABLES": ["tests.jobs", "tests.jobs_tasks"]}
    delayq_settings.TASKS = {"default": {"BACKEND": BACKEND},
                             "anyq": {"BACKEND": BACKEND, "QUEUES": []}}
    from tests import jobs_tasks

    return jobs_tasks


@pytest.mark.parametrize("name", ["a,b", " lead", "tail ", "a\nb", "x#2"])
def test_any_queue_refuses_a_name_no_worker_can_be_started_for(jt, name):
    """``--queues a,b`` serves "a" and "b", ``--queues " lead"`` serves "lead": such a
    job stayed scheduled for ever."""
    task = jt.add.using(backend="anyq", queue_name=name)
    with pytest.raises(compat.InvalidTask, match="is not a queue name: .*without braces or "
                                                 "commas"):
        task.enqueue(7, 7)
    assert not Job.objects.exists()
    assert Job.objects.get(pk=jt.add.using(backend="anyq", queue_name="a-b").enqueue(7, 7).id
                           ).queue == "a-b"


def test_backend_queues_missing_from_delayq_queues_are_a_check_error(jt, delayq_settings):
    delayq_settings.TASKS = {**delayq_settings.TASKS,
                             "own": {"BACKEND": BACKEND, "QUEUES": ["default", "zzz", "yyy"]}}
    [error] = compat.tasks.task_backends["own"].check()
    assert error.id == "delayq.E102"
    assert "TASKS['own']['QUEUES'] names queue(s) ['yyy', 'zzz']" in error.msg
    assert "DELAYQ['QUEUES']" in error.msg
    if importlib.util.find_spec("django_tasks"):  # Django 5.2: its checks run once installed
        delayq_settings.INSTALLED_APPS = [*delayq_settings.INSTALLED_APPS, "django_tasks"]
    with pytest.raises(SystemCheckError, match="delayq.E102"):
        call_command("check", stdout=StringIO(), stderr=StringIO())
    assert list(compat.tasks.task_backends["anyq"].check()) == []  # QUEUES []: any name
    delayq_settings.TASKS = {"own": {"BACKEND": BACKEND, "QUEUES": ["emails"]}}
    assert list(compat.tasks.task_backends["own"].check()) == []


def test_a_whole_number_float_priority_is_its_integer(jt):
    result = jt.add.using(priority=5.0).enqueue(1, 2)
    row = Job.objects.get(pk=result.id)
    assert row.priority == 5 and type(row.priority) is int
    assert result.task.priority == 5 and jt.add.get_result(result.id) == result
    with pytest.raises(compat.InvalidTask, match="whole number"):
        jt.add.using(priority=5.5)  # Django's own rule
