"""The job admin, driven by Django's test client against the private Redis server."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_delayq import schedule
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.testing import run_due_jobs
from tests.helpers import staff_client as _staff

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "admin:django_delayq_job_changelist"
ACTION_PERMS = ("cancel_job", "run_job_now", "reschedule_job", "requeue_job")


def _url(name: str = CHANGELIST, *args: str) -> str:
    return reverse(name, args=args)


def _act(client: Client, action: str, ids: list[str], **extra: str):  # type: ignore[no-untyped-def]
    data = {"action": action, "_selected_action": ids, "index": "0", **extra}
    return client.post(_url(), data, follow=True)


def _messages(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(m) for m in response.context["messages"]]


def test_changelist_shows_counts_per_status_and_filters(delayq_settings, admin_client):
    later = [schedule("tests.jobs.add", i, 1, delay=3600).id for i in range(3)]
    boom = schedule("tests.jobs.boom", max_attempts=1).id
    run_due_jobs()
    response = admin_client.get(_url())
    assert response.status_code == 200
    counts = {c["value"]: c["count"] for c in response.context["delayq_status_counts"]}
    assert counts["scheduled"] == 3 and counts["dead"] == 1 and counts["succeeded"] == 0
    html = response.content.decode()
    assert 'data-status="dead"' in html and "delayq-counts" in html
    dead_only = admin_client.get(_url() + "?status__exact=dead")
    assert [j.pk for j in dead_only.context["cl"].result_list] == [boom]
    by_path = admin_client.get(_url() + "?callable_path=tests.jobs.add")
    assert sorted(j.pk for j in by_path.context["cl"].result_list) == sorted(later)
    by_queue = admin_client.get(_url() + "?queue=emails")
    assert list(by_queue.context["cl"].result_list) == []


def test_search_by_id_and_path(delayq_settings, admin_client):
    a = schedule("tests.jobs.add", 1, 2, delay=60).id
    b = schedule("tests.jobs.noop", delay=60).id
    found = admin_client.get(_url() + "?q=" + a).context["cl"].result_list
    assert [j.pk for j in found] == [a]
    found = admin_client.get(_url() + "?q=jobs.noop").context["cl"].result_list
    assert [j.pk for j in found] == [b]


@pytest.mark.parametrize("key", ["two words", 'say "hi"', "it's"])
def test_search_by_a_whole_key_that_django_would_split(delayq_settings, admin_client, key):
    """Django splits a search into words (quotes group them): an idempotency key with a
    space or a quote is still found whole, within the list's filters."""
    job_id = schedule("tests.jobs.noop", delay=60, key=key).id
    schedule("tests.jobs.noop", delay=60, key="two")
    found = admin_client.get(_url(), {"q": key}).context["cl"].result_list
    assert [j.pk for j in found] == [job_id]
    dead_only = admin_client.get(_url(), {"q": key, "status__exact": "dead"})
    assert list(dead_only.context["cl"].result_list) == []


def test_creation_date_filters_in_the_address(delayq_settings, admin_client):
    """No date hierarchy (its links read every row's date), but the creation date still
    filters when given in the address."""
    job_id = schedule("tests.jobs.noop", delay=60).id
    today = timezone.now()
    response = admin_client.get(_url() + "?created_at__year=%d&created_at__month=%d"
                                % (today.year, today.month))
    assert [j.pk for j in response.context["cl"].result_list] == [job_id]
    assert b'class="toplinks"' not in response.content  # Django's date hierarchy bar
    response = admin_client.get(_url() + "?created_at__year=%d" % (today.year - 1))
    assert list(response.context["cl"].result_list) == []


def test_detail_page_shows_arguments_attempts_and_traceback(delayq_settings, admin_client):
    job_id = schedule("tests.jobs.boom", "kaput", max_attempts=2, backoff=[0]).id
    run_due_jobs()
    run_due_jobs()
    job = Job.objects.get(pk=job_id)
    assert job.status == JobStatus.DEAD and JobAttempt.objects.filter(job=job).count() == 2
    html = admin_client.get(_url("admin:django_delayq_job_change", job_id)).content.decode()
    assert "kaput" in html  # the argument, the errors and the traceback
    assert "attempt history" in html.lower()
    assert html.count("RuntimeError") >= 3  # last_error, two attempt rows (+ traceback)
    assert "Traceback (most recent call last)" in html
    assert 'name="_save"' not in html  # read-only: no form to save


def test_rows_cannot_be_added_changed_or_deleted(delayq_settings, admin_client):
    job_id = schedule("tests.jobs.noop", delay=60).id
    assert admin_client.get(_url("admin:django_delayq_job_add")).status_code == 403
    assert admin_client.get(_url("admin:django_delayq_job_delete", job_id)).status_code == 403
    admin_client.post(_url("admin:django_delayq_job_change", job_id), {"queue": "emails"})
    assert Job.objects.get(pk=job_id).queue == "default"
    actions = admin_client.get(_url()).context["action_form"].fields["action"].choices
    assert "delete_selected" not in [name for name, _ in actions]


def test_cancel_reports_each_outcome(delayq_settings, admin_client):
    waiting = [schedule("tests.jobs.noop", delay=3600).id for _ in range(3)]
    done = schedule("tests.jobs.noop").id
    run_due_jobs()
    response = _act(admin_client, "cancel_jobs", [*waiting, done])
    assert _messages(response) == ["3 cancelled, 1 already finished."]
    assert set(Job.objects.filter(pk__in=waiting).values_list("status", flat=True)) == {
        JobStatus.CANCELLED}
    assert Job.objects.get(pk=done).status == JobStatus.SUCCEEDED


def test_run_now_makes_a_future_job_due(delayq_settings, admin_client):
    job_id = schedule("tests.jobs.add", 2, 2, delay=3600).id
    assert run_due_jobs() == 0
    response = _act(admin_client, "run_jobs_now", [job_id])
    assert _messages(response) == ["1 due now."]
    assert run_due_jobs() == 1
    assert Job.objects.get(pk=job_id).result == 4


def test_reschedule_shows_a_form_then_moves_the_jobs(delayq_settings, admin_client):
    job_id = schedule("tests.jobs.noop", delay=5).id
    page = _act(admin_client, "reschedule_jobs", [job_id])
    assert page.templates[0].name == "admin/django_delayq/job/reschedule.html"
    assert job_id in page.content.decode()
    bad = _act(admin_client, "reschedule_jobs", [job_id], apply="1", delay="10",
               at="2030-01-01T09:00")
    assert "not both" in bad.content.decode()
    before = timezone.now()
    done = _act(admin_client, "reschedule_jobs", [job_id], apply="1", delay="7200")
    assert _messages(done)[0] == "1 moved."
    run_at = Job.objects.get(pk=job_id).run_at
    assert before + timedelta(seconds=7190) < run_at < before + timedelta(seconds=7300)


def test_reschedule_all_jobs_across_pages(delayq_settings, admin_client):
    """"Select all N jobs": the form posts back what the list posted, and every job of the
    filtered list moves, not only the ticked one."""
    ids = [schedule("tests.jobs.noop", delay=5).id for _ in range(3)]
    page = _act(admin_client, "reschedule_jobs", [ids[0]], select_across="1").content.decode()
    hidden = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page)
    data: dict[str, list[str]] = {}
    for name, value in hidden:
        data.setdefault(name, []).append(value)
    assert data["select_across"] == ["1"] and data["_selected_action"] == [ids[0]]
    done = admin_client.post(_url(), {**data, "apply": "1", "delay": "7200"}, follow=True)
    assert _messages(done)[0] == "3 moved."
    later = timezone.now() + timedelta(seconds=7000)
    assert all(job.run_at > later for job in Job.objects.filter(pk__in=ids))


def test_reschedule_to_a_date_time(delayq_settings, admin_client):
    job_id = schedule("tests.jobs.noop", delay=5).id
    _act(admin_client, "reschedule_jobs", [job_id], apply="1", at="2031-02-03T04:05")
    assert Job.objects.get(pk=job_id).run_at.isoformat() == "2031-02-03T04:05:00+00:00"


def test_requeue_dead_keeps_the_id_and_finished_becomes_a_new_job(delayq_settings,
                                                                  admin_client):
    dead = schedule("tests.jobs.boom", max_attempts=1).id
    ok = schedule("tests.jobs.add", 1, 1).id
    live = schedule("tests.jobs.noop", delay=3600).id
    run_due_jobs()
    response = _act(admin_client, "requeue_jobs", [dead, ok, live])
    assert sorted(_messages(response)[0].rstrip(".").split(", ")) == [
        "1 not finished (still live)", "1 requeued", "1 requeued as a new job"]
    assert Job.objects.get(pk=dead).status == JobStatus.SCHEDULED
    assert Job.objects.filter(callable_path="tests.jobs.add").count() == 2


def test_without_action_permissions_the_list_is_read_only(delayq_settings):
    job_id = schedule("tests.jobs.noop", delay=3600).id
    client = _staff()
    response = client.get(_url())
    assert response.status_code == 200
    assert response.context["action_form"] is None  # no actions, no checkboxes
    assert 'name="_selected_action"' not in response.content.decode()
    assert client.get(_url("admin:django_delayq_job_change", job_id)).status_code == 200
    _act(client, "cancel_jobs", [job_id])
    assert Job.objects.get(pk=job_id).status == JobStatus.SCHEDULED


@pytest.mark.parametrize("perm, action", [
    ("cancel_job", "cancel_jobs"), ("run_job_now", "run_jobs_now"),
    ("reschedule_job", "reschedule_jobs"), ("requeue_job", "requeue_jobs"),
])
def test_each_action_needs_its_own_permission(delayq_settings, perm, action):
    response = _staff(perm).get(_url())
    choices = [name for name, _ in response.context["action_form"].fields["action"].choices]
    assert action in choices
    others = {"cancel_jobs", "run_jobs_now", "reschedule_jobs", "requeue_jobs"} - {action}
    assert not others & set(choices)


def test_user_without_view_permission_is_refused(delayq_settings):
    user = User.objects.create_user("nobody", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get(_url()).status_code == 403


def test_status_counts_stop_at_the_cap(delayq_settings, admin_client, monkeypatch):  # type: ignore[no-untyped-def]
    """Each count is a bounded index scan: over the cap the header says "cap+"."""
    from django_delayq.admin.job_admin import JobAdmin

    monkeypatch.setattr(JobAdmin, "status_count_cap", 2)
    for i in range(3):
        schedule("tests.jobs.add", i, 1, delay=3600)
    response = admin_client.get(_url())
    counts = {c["value"]: (c["count"], c["more"])
              for c in response.context["delayq_status_counts"]}
    assert counts["scheduled"] == (2, True) and counts["dead"] == (0, False)
    assert '<b class="delayq-count-n">2+</b>' in response.content.decode()


def test_detail_page_shows_the_error_type_beside_its_message_escaped(delayq_settings,
                                                                      admin_client):
    job_id = schedule("tests.jobs.boom", "<script>alert(1)</script>", max_attempts=1).id
    run_due_jobs()
    html = admin_client.get(_url("admin:django_delayq_job_change", job_id)).content.decode()
    assert "<code>builtins.RuntimeError</code> &lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html
    assert html.count("<code>builtins.RuntimeError</code>") == 2  # last error, attempt row
