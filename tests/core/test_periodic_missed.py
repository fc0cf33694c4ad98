"""The ``skip`` policy drops only the ticks missed while no worker ran: a tick job waiting
out its jitter or queued behind a busy worker runs; one left over from a downtime never
runs, even when the first worker back claims before its keeper thread looks. An admin
edit writes the definition only, never the tick fields a worker wrote meanwhile."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib import admin as django_admin
from django.contrib.auth.models import User
from django.contrib.messages.storage.cookie import CookieStorage
from django.test import RequestFactory
from django.utils import timezone

from django_delayq.admin.schedule_admin import ScheduleAdmin, ScheduleForm
from django_delayq.core import periodic
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus, Schedule
from tests.core.test_periodic import dq as _dq  # noqa: F401 - a fixture, used by name
from tests.core.test_periodic import every
from tests.helpers import burst

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("_dq")]


def left_over(missed: str) -> tuple[Schedule, str]:
    """A schedule whose pending tick job was due ten minutes ago (no worker ran since)."""
    t0 = timezone.now().replace(microsecond=0) - timedelta(minutes=11)
    s = every(60, t0, missed=missed)
    job_id = periodic.keep(s, now=t0 + timedelta(seconds=1))
    assert job_id is not None
    s.refresh_from_db()
    assert Job.objects.get(pk=job_id).run_at == t0 + timedelta(seconds=60)
    return s, job_id


def test_a_tick_job_waiting_out_its_jitter_is_not_missed() -> None:
    t0 = timezone.now().replace(microsecond=0) + timedelta(minutes=1)
    s = every(3600, t0, jitter_seconds=30, missed="skip")
    job_id = periodic.keep(s)
    Job.objects.filter(pk=job_id).update(run_at=t0 + timedelta(seconds=25))  # its jitter
    s.refresh_from_db()
    assert periodic.keep(s, now=t0 + timedelta(seconds=20)) == job_id  # tick past, not due
    assert Job.objects.get(pk=job_id).status == JobStatus.SCHEDULED
    assert periodic.keep(s, now=t0 + timedelta(seconds=31)) != job_id  # due and missed
    assert Job.objects.get(pk=job_id).status == JobStatus.CANCELLED


def test_a_tick_job_behind_a_busy_worker_is_not_missed() -> None:
    s, job_id = left_over("skip")
    due = Job.objects.get(pk=job_id).run_at
    info = {"queues": ["default"], "started": (due - timedelta(minutes=1)).isoformat()}
    get_engine().register_worker("busy-since-before", json.dumps(info))  # alive, not done yet
    assert periodic.keep(s) == job_id
    assert Job.objects.get(pk=job_id).status == JobStatus.SCHEDULED
    get_engine().register_worker("busy-since-before", json.dumps({**info, "queues": ["other"]}))
    assert periodic.keep(s) != job_id  # no worker of its queue ran: missed
    assert Job.objects.get(pk=job_id).status == JobStatus.CANCELLED


def test_the_first_worker_after_a_downtime_never_runs_a_missed_tick() -> None:
    s, job_id = left_over("skip")
    assert burst() == 0
    assert Job.objects.get(pk=job_id).status == JobStatus.CANCELLED  # never ran
    s.refresh_from_db()
    assert s.next_job_id != job_id and s.next_tick_at > timezone.now()
    assert Job.objects.get(pk=s.next_job_id).status == JobStatus.SCHEDULED


def test_the_first_worker_after_a_downtime_runs_a_missed_tick_once() -> None:
    s, job_id = left_over("once")
    assert burst() == 0
    assert Job.objects.get(pk=job_id).status == JobStatus.SUCCEEDED
    s.refresh_from_db()
    assert s.last_job_id == job_id and s.next_tick_at > timezone.now()
    assert Job.objects.get(pk=s.next_job_id).status == JobStatus.SCHEDULED


def test_an_admin_edit_keeps_the_tick_a_worker_started_meanwhile() -> None:
    t0 = timezone.now().replace(microsecond=0) + timedelta(minutes=5)
    s = every(600, t0)
    started = periodic.keep(s)
    on_screen = Schedule.objects.get(pk=s.pk)  # what the admin's POST read first
    periodic.tick_started(started)  # meanwhile a worker starts that tick's job
    s.refresh_from_db()
    following = s.next_job_id
    assert following != started and s.last_job_id == started
    form = ScheduleForm(instance=on_screen, data={
        "name": s.name, "callable_path": "tests.jobs.noop", "args": "[]", "kwargs": "{}",
        "queue": "", "priority": "0", "cron": "*/5 * * * *", "interval_seconds": "",
        "time_zone": "UTC", "jitter_seconds": "0", "missed": "skip", "enabled": "on"})
    assert form.is_valid(), form.errors
    request = RequestFactory().post("/")
    request.user = User.objects.create_superuser("root", password="pw")
    request._messages = CookieStorage(request)  # type: ignore[attr-defined]
    ScheduleAdmin(Schedule, django_admin.site).save_model(request, form.save(commit=False),
                                                          form, True)
    s.refresh_from_db()
    assert (s.cron, s.interval_seconds, s.version) == ("*/5 * * * *", None, 2)
    assert s.last_job_id == started  # the worker's write survived
    assert Job.objects.get(pk=started).status == JobStatus.SCHEDULED  # not cancelled
    assert Job.objects.get(pk=following).status == JobStatus.CANCELLED  # the old version's
    assert Job.objects.get(pk=s.next_job_id).status == JobStatus.SCHEDULED


def test_a_worker_entry_nested_too_deep_is_left_out() -> None:
    """An entry no worker wrote (Redis written by hand) is left out, as one of another
    version: the keeper's judgement goes on (it raised RecursionError, every pass)."""
    s, job_id = left_over("skip")
    get_engine().register_worker("deep", "[" * 30_000 + "]" * 30_000)
    assert periodic.keep(s) != job_id  # judged missed: no worker of its queue ran
    assert Job.objects.get(pk=job_id).status == JobStatus.CANCELLED
