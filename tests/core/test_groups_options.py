"""``group=``: every way of scheduling stores a job's group on its row and in Redis; a bad
group id is ``InvalidJob`` naming the value; the reconciler puts it back after a loss."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_delayq import InvalidJob, compat, job, schedule
from django_delayq.core.api import JobSpec, requeue, schedule_many
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job
from django_delayq.testing import run_due_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def stored(job_id: str, queue: str = "default") -> tuple[str, str]:
    """The group on the row and in Redis ("" for none)."""
    engine = get_engine()
    in_redis = engine.client.hget(engine.keys(queue).group, job_id)
    return Job.objects.get(pk=job_id).group, (in_redis or b"").decode()


def test_schedule_and_using_store_the_group(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    assert stored(schedule("tests.jobs.noop", group="tenant-42", delay=60).id) == (
        "tenant-42", "tenant-42")
    assert stored(job("tests.jobs.noop").using(group="t7", delay=60).schedule().id) == (
        "t7", "t7")
    assert stored(schedule("tests.jobs.noop", delay=60).id) == ("", "")


def test_schedule_many_stores_the_call_s_group_or_a_spec_s_own(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    ids = schedule_many("tests.jobs.add", [JobSpec(args=[1, 2], delay=60),
                                           JobSpec(args=[3, 4], group="own", delay=60)],
                        group="call")
    assert [stored(i) for i in ids] == [("call", "call"), ("own", "own")]
    [plain] = schedule_many("tests.jobs.add", [JobSpec(args=[1, 2], delay=60)])
    assert stored(plain) == ("", "")


@pytest.mark.parametrize("bad", ["", "x" * 129, "a\nb", "tab\there", "\x7f", 42, b"bytes",
                                 "\udc80", "line\u2028break", "para\u2029graph"])
def test_a_bad_group_is_invalid_job_naming_it(delayq_engine, bad) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match="group") as info:
        schedule("tests.jobs.noop", group=bad)
    assert repr(bad)[:20] in str(info.value) or "characters" in str(info.value)
    with pytest.raises(InvalidJob, match="group"):
        schedule_many("tests.jobs.noop", [JobSpec(group=bad)])
    assert not Job.objects.exists()


def test_128_characters_are_a_group(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    assert stored(schedule("tests.jobs.noop", group="g" * 128, delay=60).id)[0] == "g" * 128


def test_a_function_taking_group_gets_it_through_job_schedule(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match="named 'group'"):
        schedule("tests.jobs_more.takes_group", group="x")
    h = job("tests.jobs_more.takes_group").schedule(group="x")
    assert Job.objects.get(pk=h.id).kwargs == {"group": "x"}


def test_requeue_keeps_the_group(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    done = schedule("tests.jobs.noop", group="g")
    run_due_jobs()
    again = requeue(done.id)
    assert stored(again.id) == ("g", "g")


def test_a_redis_loss_gets_the_groups_back_from_the_rows(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    grouped = schedule("tests.jobs.noop", group="g", delay=3600)
    plain = schedule("tests.jobs.noop", delay=3600)
    delayq_engine.purge("default")  # Redis loses everything (restart without AOF)
    Reconciler(delayq_engine, get_settings(), ("default",)).run_all(assume_lost=True)
    assert stored(grouped.id) == ("g", "g") and stored(plain.id) == ("", "")


@pytest.mark.skipif(compat.tasks is None, reason="no Django Tasks framework")
def test_the_tasks_backend_s_group_option(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    backend = "django_delayq.backends.DelayQBackend"
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "ALLOWED_CALLABLES": ["tests.jobs", "tests.jobs_tasks"]}
    delayq_settings.TASKS = {"default": {"BACKEND": backend, "OPTIONS": {"GROUP": "acme"}}}
    from tests import jobs_tasks

    result = jobs_tasks.add.enqueue(1, 2)
    assert stored(result.id) == ("acme", "acme")
    delayq_settings.TASKS = {"default": {"BACKEND": backend, "OPTIONS": {"GROUP": "a\x00"}}}
    with pytest.raises(ImproperlyConfigured, match=r"\['GROUP'\]"):
        compat.tasks.task_backends["default"]  # noqa: B018


def test_a_child_released_by_its_parent_keeps_its_group(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    parent = schedule("tests.jobs.noop", delay=3600)
    child = schedule("tests.jobs.noop", group="g", after=[parent], after_failure="run")
    assert stored(child.id) == ("g", "")  # waiting: not in Redis yet
    parent.cancel()  # the child is released (after_failure="run")
    assert Job.objects.get(pk=child.id).status == "scheduled"
    assert stored(child.id) == ("g", "g")
