"""Every URL the job admin adds (``JobAdmin.get_urls``) refuses a staff user who may not
view jobs, whatever action permissions they hold: the button on a job's page acts as the
list's own action, which Django gates on the view permission as well as the action's. A
missing job id gets the same answer as an existing one (no existence oracle)."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from django_delayq import schedule
from django_delayq.admin.job_admin import BUTTONS
from django_delayq.models import Job, JobStatus

pytestmark = pytest.mark.django_db(transaction=True)

ACTION_PERMISSIONS = ("cancel_job", "run_job_now", "reschedule_job", "requeue_job")
QUEUE_PERMISSIONS = ("pause_queue", "purge_queue", "change_grouplimit")
MISSING = "01J0000000000000000MISSING"


def _client(*codenames: str) -> Client:
    """A logged-in staff user holding exactly ``codenames`` of the app (no view_job
    unless named)."""
    user = User.objects.create_user("operator-%d" % User.objects.count(), password="pw",
                                    is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="django_delayq", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def _act_url(job_id: str) -> str:
    return reverse("admin:django_delayq_job_act", args=(job_id,))


@pytest.mark.parametrize("op", list(BUTTONS))
def test_an_action_permission_without_view_job_is_refused_on_the_page_button(
        delayq_settings, op):
    job_id = schedule("tests.jobs.noop", delay=3600).id
    client = _client(*ACTION_PERMISSIONS)
    assert client.get(reverse("admin:django_delayq_job_changelist")).status_code == 403
    assert client.get(reverse("admin:django_delayq_job_change",
                              args=(job_id,))).status_code == 403
    for data in ({"op": op, "confirm": "yes", "delay": "5"}, {"op": op}):
        for target in (job_id, MISSING):
            assert client.post(_act_url(target), data).status_code == 403, (data, target)
            assert client.get(_act_url(target), data).status_code == 403, (data, target)
    assert Job.objects.get(pk=job_id).status == JobStatus.SCHEDULED
    assert not LogEntry.objects.exists()


def test_view_job_without_the_action_permission_is_refused_for_any_id(delayq_settings):
    job_id = schedule("tests.jobs.noop", delay=3600).id
    client = _client("view_job")
    for target in (job_id, MISSING):
        assert client.post(_act_url(target), {"op": "cancel", "confirm": "yes"}
                           ).status_code == 403
    assert Job.objects.get(pk=job_id).status == JobStatus.SCHEDULED


def test_view_job_and_the_action_permission_act_and_a_missing_id_is_404(delayq_settings):
    job_id = schedule("tests.jobs.noop", delay=3600).id
    client = _client("view_job", "cancel_job")
    assert client.post(_act_url(MISSING), {"op": "cancel", "confirm": "yes"}).status_code == 404
    assert client.post(_act_url(job_id), {"op": "cancel", "confirm": "yes"}).status_code == 302
    assert Job.objects.get(pk=job_id).status == JobStatus.CANCELLED


def test_every_added_page_refuses_a_user_who_may_not_view_jobs(delayq_settings):
    """The queues page, the dashboard and its data refuse GET and POST without view_job,
    even with every queue permission; a queue stays unpaused."""
    client = _client(*ACTION_PERMISSIONS, *QUEUE_PERMISSIONS)
    for name in ("queues", "dashboard", "dashboard_data"):
        url = reverse("admin:django_delayq_job_" + name)
        assert client.get(url).status_code == 403, name
        assert client.post(url, {"queue": "default", "op": "pause"}).status_code == 403, name
    from django_delayq.core.connection import get_engine  # the settings' engine, set above

    assert get_engine().paused(["default"]) == []
    assert not LogEntry.objects.exists()


def test_the_report_pages_need_view_report_not_view_job(delayq_settings):
    """The report is granted apart from the rows (docs/admin.md): view_job alone is
    refused, and so is every action permission."""
    for codenames in (("view_job",), ACTION_PERMISSIONS):
        client = _client(*codenames)
        assert client.get(reverse("admin:django_delayq_job_report")).status_code == 403
        assert client.get(reverse("admin:django_delayq_job_report_file",
                                  args=("any/report.html",))).status_code == 403
