"""The buttons on a job's page: the list's actions on one job, each shown only with its
permission and where the job's status allows it, checked again on POST, cancel behind a
confirmation page, each change in the admin's log."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse
from django.utils import timezone

from django_delayq import schedule
from django_delayq.models import Job, JobStatus
from django_delayq.testing import run_due_jobs
from tests.helpers import staff_client

pytestmark = pytest.mark.django_db(transaction=True)


def _page(client, job_id: str) -> str:  # type: ignore[no-untyped-def]
    response = client.get(reverse("admin:django_delayq_job_change", args=(job_id,)))
    assert response.status_code == 200
    return response.content.decode()


def _act(client, job_id: str, **data: str):  # type: ignore[no-untyped-def]
    return client.post(reverse("admin:django_delayq_job_act", args=(job_id,)), data,
                       follow=True)


def _said(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(m) for m in response.context["messages"]]


def _log(job_id: str) -> list[str]:
    return [e.change_message for e in LogEntry.objects.filter(
        object_id=job_id, action_flag=CHANGE).order_by("pk")]


def _buttons(html: str) -> list[str]:
    return [part.split('"', 1)[0] for part in html.split('data-op="')[1:]]


def test_buttons_follow_the_status_and_the_permissions(delayq_settings, admin_client):
    waiting = schedule("tests.jobs.noop", delay=3600).id
    assert _buttons(_page(admin_client, waiting)) == ["run_now", "reschedule", "cancel"]
    dead = schedule("tests.jobs.boom", max_attempts=1).id
    run_due_jobs()
    assert _buttons(_page(admin_client, dead)) == ["requeue"]
    assert _buttons(_page(staff_client("cancel_job"), waiting)) == ["cancel"]


def test_without_the_permission_no_button_and_a_forged_post_is_refused(delayq_settings):
    job_id = schedule("tests.jobs.noop", delay=3600).id
    client = staff_client("run_job_now")
    assert _buttons(_page(client, job_id)) == ["run_now"]
    for op in ("cancel", "requeue", "reschedule", "nonsense"):
        url = reverse("admin:django_delayq_job_act", args=(job_id,))
        assert client.post(url, {"op": op, "confirm": "yes", "delay": "5"}).status_code == 403
    assert client.get(reverse("admin:django_delayq_job_act", args=(job_id,))).status_code == 403
    assert Job.objects.get(pk=job_id).status == JobStatus.SCHEDULED and not _log(job_id)


def test_cancel_asks_first_and_is_logged(delayq_settings):
    job_id = schedule("tests.jobs.noop", delay=3600).id
    client = staff_client("cancel_job")
    asked = _act(client, job_id, op="cancel")
    assert b"Yes, cancel it" in asked.content and b'name="confirm" value="yes"' in asked.content
    assert Job.objects.get(pk=job_id).status == JobStatus.SCHEDULED
    done = _act(client, job_id, op="cancel", confirm="yes")
    assert done.redirect_chain[-1][0] == reverse("admin:django_delayq_job_change",
                                                 args=(job_id,))
    assert _said(done) == ["1 cancelled."]
    assert Job.objects.get(pk=job_id).status == JobStatus.CANCELLED
    assert _log(job_id) == ["Cancelled."]
    assert _said(_act(client, job_id, op="cancel", confirm="yes")) == ["1 already cancelled."]


def test_run_now_reschedule_and_requeue_from_the_page(delayq_settings, admin_client):
    job_id = schedule("tests.jobs.noop", delay=3600).id
    assert _said(_act(admin_client, job_id, op="run_now")) == ["1 due now."]
    assert Job.objects.get(pk=job_id).run_at <= timezone.now()
    moved = _act(admin_client, job_id, op="reschedule", delay="120")
    assert _said(moved)[0] == "1 moved."
    due = Job.objects.get(pk=job_id).run_at
    assert timedelta(seconds=110) < due - timezone.now() <= timedelta(seconds=120)
    bad = _act(admin_client, job_id, op="reschedule", delay="", at="")
    assert _said(bad) == ["Not rescheduled: Give either a delay or a date and time, not both."]
    dead = schedule("tests.jobs.boom", max_attempts=1).id
    run_due_jobs()
    assert _said(_act(admin_client, dead, op="requeue")) == ["1 requeued."]
    log = _log(job_id)
    assert log[0] == "Made due now (run now)."
    assert log[1].startswith("Rescheduled: due %d-" % due.year)  # a time, not "in 0:02:00"
    assert _log(dead) == ["Requeued with fresh attempts."]


@pytest.mark.parametrize("at, said", [
    ("9999-12-31T23:00", "at most 100 years from now"),  # 10000-01-01 04:00 UTC
    ("9999-12-31T09:00", "at most 100 years from now"),
    ("2030-03-10T02:30", "2030-03-10 02:30:00 couldn’t be interpreted"),  # DST gap
])
def test_a_time_reschedule_refuses_is_a_form_error(delayq_settings, admin_client, at, said):
    """A time ``api.reschedule`` would refuse is the form's error, as an invalid one is,
    not "1 failed": on the job's page and in the list's action."""
    delayq_settings.TIME_ZONE = "America/New_York"
    job_id = schedule("tests.jobs.noop", delay=3600).id
    due = Job.objects.get(pk=job_id).run_at
    [message] = _said(_act(admin_client, job_id, op="reschedule", at=at))
    assert message.startswith("Not rescheduled: ") and said in message, message
    listed = admin_client.post(reverse("admin:django_delayq_job_changelist"), {
        "action": "reschedule_jobs", "_selected_action": [job_id], "apply": "1", "at": at})
    assert listed.status_code == 200 and said in listed.content.decode()
    assert not list(listed.context["messages"])
    assert Job.objects.get(pk=job_id).run_at == due
