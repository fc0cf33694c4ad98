"""A periodic schedule's ``group``: every tick's job, and a run-now, carries it; a bad one
in ``DELAYQ["SCHEDULES"]`` is reported naming the schedule and the value; an empty one is
none."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_delayq.admin.schedule_admin import run_once
from django_delayq.core import conf, periodic
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, Schedule
from tests.helpers import point_at

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_schedule_s_jobs_carry_its_group(settings, redis_server) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, ALLOWED_CALLABLES=["tests.jobs"])
    periodic.sync_settings({"nightly": {"callable": "tests.jobs.noop", "interval": 3600,
                                        "group": "tenant-42",
                                        "start": timezone.now() + timedelta(minutes=5)}})
    s = Schedule.objects.get(name="nightly")
    tick = Job.objects.get(pk=periodic.keep(s))
    now = Job.objects.get(pk=run_once(s))
    engine = get_engine()
    assert (tick.group, now.group) == ("tenant-42", "tenant-42")
    assert engine.client.hget(engine.keys("default").group, tick.id) == b"tenant-42"


def test_a_bad_group_in_settings_is_named() -> None:
    [problem] = conf.settings_problems({"nightly": {"callable": "tests.jobs.noop",
                                                         "interval": 60, "group": "a\nb"}})
    assert "'nightly'" in problem and "group" in problem and "'a\\nb'" in problem


def test_an_empty_group_in_settings_is_no_group(settings, redis_server) -> None:  # type: ignore[no-untyped-def]
    """As in the admin (docs/periodic.md: "group empty: none")."""
    point_at(settings, redis_server, ALLOWED_CALLABLES=["tests.jobs"])
    definitions = {"nightly": {"callable": "tests.jobs.noop", "interval": 3600, "group": ""}}
    assert conf.settings_problems(definitions) == []
    assert periodic.sync_settings(definitions) == 0
    tick = Job.objects.get(pk=periodic.keep(Schedule.objects.get(name="nightly")))
    assert tick.group == ""
    engine = get_engine()
    assert engine.client.hget(engine.keys("default").group, tick.id) is None
