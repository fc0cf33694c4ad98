"""The admin with ``USE_TZ = False`` and a ``TIME_ZONE`` off UTC: rows hold the naive wall
time of ``TIME_ZONE``; the job list and page, the reschedule action's log line and the
schedules' tick columns show those times (in that zone, named) instead of failing on a
naive datetime."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core import periodic
from django_delayq.models import Job, Schedule
from django_delayq.testing import run_due_jobs
from tests.helpers import point_at

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def local(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, ALLOWED_CALLABLES=["tests.jobs"])
    settings.USE_TZ, settings.TIME_ZONE = False, "Europe/Berlin"


def test_the_job_list_and_page_show_the_local_times(local, admin_client) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.add", 1, 2)
    assert run_due_jobs() == 1
    row = Job.objects.get(pk=h.id)
    assert row.finished_at is not None and row.finished_at.tzinfo is None
    listed = admin_client.get(reverse("admin:django_delayq_job_changelist"))
    assert listed.status_code == 200
    assert row.run_at.strftime("%m-%d %H:%M:%S") in listed.content.decode()
    page = admin_client.get(reverse("admin:django_delayq_job_change", args=(h.id,)))
    assert page.status_code == 200
    html = page.content.decode()
    assert row.finished_at.strftime("%Y-%m-%d %H:%M:%S") in html
    assert "(Europe/Berlin)" in html


def test_reschedule_logs_the_local_due_time(local, admin_client) -> None:  # type: ignore[no-untyped-def]
    job_id = schedule("tests.jobs.noop", delay=5).id
    done = admin_client.post(reverse("admin:django_delayq_job_changelist"), {
        "action": "reschedule_jobs", "_selected_action": [job_id], "apply": "1",
        "delay": "7200"}, follow=True)
    assert done.status_code == 200
    [line] = LogEntry.objects.filter(object_id=job_id, action_flag=CHANGE).values_list(
        "change_message", flat=True)
    due = Job.objects.get(pk=job_id).run_at  # naive, Berlin's wall time
    # the line's time is the action's; the row's is Redis's, a few ms later (maybe past a
    # minute's or a second's edge): the same instant within a second
    found = re.search(r"due (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) CES?T", line)
    assert found is not None, line
    said = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S")
    assert abs((said - due).total_seconds()) < 1.5, (line, due)


def test_a_schedules_ticks_in_both_zones(local, admin_client) -> None:  # type: ignore[no-untyped-def]
    s = Schedule.objects.create(name="hourly", callable_path="tests.jobs.noop",
                                cron="0 * * * *", time_zone="Asia/Kolkata")
    periodic.keep(s)
    tick = datetime(2030, 1, 15, 1, 30, 7, tzinfo=UTC)  # 02:30:07 CET, 07:00:07 IST
    Schedule.objects.filter(pk=s.pk).update(last_tick_at=timezone.make_naive(tick))
    html = admin_client.get("/admin/django_delayq/schedule/").content.decode()
    assert ">01-15 02:30:07</time>" in html and "= 07:00:07 IST" in html
    page = admin_client.get("/admin/django_delayq/schedule/%d/change/" % s.pk)
    assert page.status_code == 200 and ">2030-01-15 02:30:07</time>" in page.content.decode()


def test_the_dashboard_and_queues_pages(local, admin_client) -> None:  # type: ignore[no-untyped-def]
    schedule("tests.jobs.add", 1, 2)
    schedule("tests.jobs.noop", delay=3600)
    assert run_due_jobs() == 1
    for name in ("dashboard", "dashboard_data", "queues"):
        response = admin_client.get(reverse("admin:django_delayq_job_%s" % name))
        assert response.status_code == 200, name
    data = admin_client.get(reverse("admin:django_delayq_job_dashboard_data")).json()
    assert data, data
