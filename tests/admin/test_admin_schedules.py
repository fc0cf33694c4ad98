"""The schedules admin: a schedule from settings can be disabled and enabled (its form
has only ``enabled``), a picker of the allowed job functions, run now / enable / disable
actions with their permission and admin log, tick times to the second in both zones,
and the last tick's job linked with its status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.utils import timezone

from django_delayq.admin.schedule_admin import ScheduleForm, job_functions
from django_delayq.core import periodic
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus, Schedule
from tests.helpers import point_at, staff_client

pytestmark = pytest.mark.django_db(transaction=True)
LIST = "/admin/django_delayq/schedule/"


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, ALLOWED_CALLABLES=["tests.jobs"])
    return get_engine()


def _from_settings(settings) -> Schedule:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "SCHEDULES": {"nightly": {
        "callable": "tests.jobs.noop", "cron": "0 2 * * *", "timezone": "Europe/Berlin"}}}
    periodic.sync_from_settings()
    s = Schedule.objects.get(name="nightly")
    periodic.keep(s)
    s.refresh_from_db()
    return s


def _log(s: Schedule) -> list[str]:
    return [e.change_message for e in LogEntry.objects.filter(
        object_id=str(s.pk), action_flag=CHANGE).order_by("pk")]


def test_a_schedule_from_settings_can_be_disabled_and_enabled_in_its_form(dq, settings):  # type: ignore[no-untyped-def]
    s = _from_settings(settings)
    pending = s.next_job_id
    client = staff_client("view_schedule", "change_schedule")
    url = "%s%d/change/" % (LIST, s.pk)
    assert client.post(url, {}).status_code == 302  # "enabled" unticked: disabled
    s.refresh_from_db()
    assert not s.enabled and Job.objects.get(pk=pending).status == JobStatus.CANCELLED
    assert client.post(url, {"enabled": "on"}).status_code == 302
    s.refresh_from_db()
    assert s.enabled and s.next_job_id and s.cron == "0 2 * * *"


def test_the_callable_is_picked_from_the_allowed_job_functions(dq):  # type: ignore[no-untyped-def]
    paths = [value for value, _label in job_functions()]
    assert "tests.jobs.noop" in paths and "tests.jobs.add" in paths
    assert not any(p.rsplit(".", 1)[1].startswith("_") for p in paths if p)
    assert "tests.jobs.json" not in paths  # a module imported there is no job function
    form = ScheduleForm(data={"name": "x", "callable_path": "os.system", "args": "[]",
                              "kwargs": "{}", "queue": "", "priority": "0",
                              "cron": "* * * * *", "time_zone": "UTC", "jitter_seconds": "0",
                              "missed": "skip", "enabled": "on"})
    assert not form.is_valid() and "callable_path" in form.errors
    # the definition's error names the value posted, as manage.py check does
    [why] = form.non_field_errors()
    assert why.startswith("'os.system'") and "None" not in why, why
    gone = Schedule(name="old", callable_path="tests.jobs.removed_long_ago")
    assert ScheduleForm(instance=gone).fields["callable_path"].choices[1] == (  # type: ignore[attr-defined]
        "tests.jobs.removed_long_ago", "tests.jobs.removed_long_ago")


def test_disable_enable_and_run_now_actions_report_and_log(dq, settings):  # type: ignore[no-untyped-def]
    s = _from_settings(settings)
    client = staff_client("view_schedule", "change_schedule")

    def act(action: str) -> list[str]:
        page = client.post(LIST, {"action": action, "_selected_action": [s.pk], "index": "0"},
                           follow=True)
        return [str(m) for m in page.context["messages"]]

    assert act("disable_schedules") == ["1 disabled."]
    assert act("disable_schedules") == ["1 already disabled."]
    s.refresh_from_db()
    assert not s.enabled and not s.next_job_id
    assert act("enable_schedules") == ["1 enabled."]
    s.refresh_from_db()
    assert s.enabled and s.next_job_id
    messages = act("run_schedules_now")
    assert messages[0] == "1 scheduled to run now."
    extra = Job.objects.exclude(pk=s.next_job_id).get(callable_path="tests.jobs.noop",
                                                     status=JobStatus.SCHEDULED)
    assert extra.run_at <= timezone.now() and extra.key is None
    assert "/admin/django_delayq/job/%s/change/" % extra.pk in messages[1]
    assert _log(s) == ["Disabled.", "Enabled.", "Run now as job %s." % extra.pk]


def test_the_actions_need_the_change_permission(dq, settings):  # type: ignore[no-untyped-def]
    s = _from_settings(settings)
    client = staff_client("view_schedule")
    page = client.get(LIST).content.decode()
    assert "run_schedules_now" not in page and "disable_schedules" not in page
    client.post(LIST, {"action": "disable_schedules", "_selected_action": [s.pk],
                       "index": "0"})
    s.refresh_from_db()
    assert s.enabled


def test_ticks_to_the_second_in_both_zones_and_the_last_outcome(dq, settings):  # type: ignore[no-untyped-def]
    s = _from_settings(settings)
    dead = Job.objects.create(id="01" + "d" * 24, queue="default",
                              callable_path="tests.jobs.noop", status=JobStatus.DEAD,
                              run_at=timezone.now(), attempts=1, max_attempts=1)
    tick = datetime(2030, 1, 15, 1, 0, 7, tzinfo=UTC)  # 02:00:07 in Berlin (CET)
    Schedule.objects.filter(pk=s.pk).update(last_tick_at=tick, last_job_id=dead.pk)
    client = staff_client("view_schedule")
    html = client.get(LIST).content.decode()
    assert ">01-15 01:00:07</time>" in html and "= 02:00:07 CET" in html
    assert "2030-01-15 02:00:07 CET (Europe/Berlin)" in html
    assert "0 2 * * * (Europe/Berlin)" in html
    outcome = html.split('class="field-last_outcome"', 1)[1].split("</td>", 1)[0]
    assert "/admin/django_delayq/job/%s/change/" % dead.pk in outcome and "dead" in outcome
    page = client.get("%s%d/change/" % (LIST, s.pk)).content.decode()
    assert ">2030-01-15 01:00:07</time>" in page and "= 02:00:07 CET" in page


def test_a_schedule_page_with_a_past_tick_shows(dq):  # type: ignore[no-untyped-def]
    s = Schedule.objects.create(name="every", callable_path="tests.jobs.noop",
                                interval_seconds=10, time_zone="UTC",
                                next_tick_at=timezone.now() - timedelta(seconds=3))
    assert staff_client("view_schedule").get("%s%d/change/" % (LIST, s.pk)).status_code == 200


def test_run_now_keeps_the_schedules_atomic_option(dq):  # type: ignore[no-untyped-def]
    s = Schedule.objects.create(name="atomic", callable_path="tests.jobs.noop",
                                interval_seconds=60, atomic=True)
    client = staff_client("view_schedule", "change_schedule")
    client.post(LIST, {"action": "run_schedules_now", "_selected_action": [s.pk],
                       "index": "0"})
    assert Job.objects.get(callable_path="tests.jobs.noop", key=None).atomic is True
    form = client.get("%s%d/change/" % (LIST, s.pk)).content.decode()
    field = form.split('name="atomic"', 1)
    assert "checked" in field[0].rsplit("<input", 1)[1] + field[1].split(">", 1)[0]
