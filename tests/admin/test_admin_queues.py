"""The queues page of the admin: counts from Redis, paused state, limits; pause, resume
and purge need their permissions, POST and a CSRF token, and are logged."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_delayq import schedule
from django_delayq.models import Job, JobStatus
from tests.helpers import staff_client

pytestmark = pytest.mark.django_db(transaction=True)


def _url() -> str:
    return reverse("admin:django_delayq_job_queues")


def _rows(response) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {q.queue: q for q in response.context["queues"]}


def _post(client: Client, **data: str):  # type: ignore[no-untyped-def]
    return client.post(_url(), data, follow=True)


def test_counts_next_due_paused_state_and_limits(delayq_engine, settings, admin_client):
    settings.DELAYQ = {**settings.DELAYQ,
                       "CALLABLE_LIMITS": {"tests.jobs.add": {"concurrency": 2}}}
    for _ in range(2):
        schedule("tests.jobs.noop", queue="emails")
    schedule("tests.jobs.noop", queue="emails", delay=3600)
    schedule("tests.jobs.noop", queue="emails", delay=7200)
    schedule("tests.jobs.noop", queue="emails", delay=7200)
    delayq_engine.claim("emails", 1, lease_ms=60_000)
    delayq_engine.set_queue_limit("emails", rate=(100, 60_000), concurrency=5)
    delayq_engine.pause("slow")
    response = admin_client.get(_url())
    assert response.status_code == 200
    rows = _rows(response)
    emails = rows["emails"]
    assert (emails.ready, emails.scheduled, emails.inflight, emails.dead) == (1, 3, 1, 0)
    assert emails.limit_text == "100/m, 5 at once" and not emails.paused
    assert emails.next_due is not None
    assert rows["slow"].paused and rows["default"].limit_text == ""
    html = response.content.decode()
    assert '<tr data-queue="slow" class="delayq-paused">' in html
    assert 'value="resume"' in html and 'value="purge"' in html
    [limit] = response.context["callable_limits"]
    assert (limit.callable, limit.limit, limit.running) == ("tests.jobs.add", "2 at once", 0)


def test_view_permission_sees_the_page_without_buttons(delayq_settings):
    client = staff_client()
    response = client.get(_url())
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="op"' not in html and "emails" in html
    assert _post(client, queue="emails", op="pause").status_code == 403
    assert _post(client, queue="emails", op="purge", confirm="yes").status_code == 403


def test_without_view_permission_the_page_is_refused(delayq_settings):
    user = User.objects.create_user("nobody", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get(_url()).status_code == 403


def test_pause_and_resume_call_the_core_api_and_are_logged(delayq_engine):
    client = staff_client("pause_queue")
    html = client.get(_url()).content.decode()
    assert 'value="pause"' in html and 'value="purge"' not in html
    response = _post(client, queue="emails", op="pause")
    assert [str(m) for m in response.context["messages"]] == ["Paused queue emails."]
    assert delayq_engine.paused(["emails", "default"]) == ["emails"]
    assert _rows(response)["emails"].paused
    again = _post(client, queue="emails", op="pause")
    assert [str(m) for m in again.context["messages"]] == ["Queue emails was already paused."]
    _post(client, queue="emails", op="resume")
    assert delayq_engine.paused(["emails"]) == []
    log = list(LogEntry.objects.filter(object_repr="queue emails").order_by("pk")
               .values_list("change_message", flat=True))
    assert log == ["Paused queue emails.", "Resumed queue emails."]
    assert _post(client, queue="emails", op="purge", confirm="yes").status_code == 403


def test_purge_needs_its_permission_and_a_confirmation(delayq_engine):
    waiting = [schedule("tests.jobs.noop", queue="emails", delay=3600).id for _ in range(3)]
    other = schedule("tests.jobs.noop", delay=3600).id
    client = staff_client("purge_queue")
    unconfirmed = _post(client, queue="emails", op="purge")
    assert "confirm" in str(list(unconfirmed.context["messages"])[0])
    assert Job.objects.filter(status=JobStatus.SCHEDULED).count() == 4
    done = _post(client, queue="emails", op="purge", confirm="yes")
    assert [str(m) for m in done.context["messages"]] == [
        "Purged queue emails: 3 waiting jobs cancelled; 0 schedule ticks kept."]
    assert set(Job.objects.filter(pk__in=waiting).values_list("status", flat=True)) == {
        JobStatus.CANCELLED}
    assert Job.objects.get(pk=other).status == JobStatus.SCHEDULED
    assert delayq_engine.stats("emails").scheduled == 0
    assert LogEntry.objects.filter(object_repr="queue emails").count() == 1
    assert _post(client, queue="emails", op="pause").status_code == 403


def test_actions_need_post_with_a_csrf_token_and_a_known_queue(delayq_engine):
    user = User.objects.create_superuser("boss", "boss@example.com", "pw")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    assert strict.post(_url(), {"queue": "emails", "op": "pause"}).status_code == 403
    assert delayq_engine.paused(["emails"]) == []
    strict.get(_url() + "?queue=emails&op=pause")  # a GET changes nothing
    assert delayq_engine.paused(["emails"]) == []
    admin = Client()
    admin.force_login(user)
    response = _post(admin, queue="nope", op="pause")
    assert [str(m) for m in response.context["messages"]] == ["Unknown queue 'nope'."]


def test_a_queue_named_only_in_queue_options_is_listed_and_can_be_paused(delayq_engine,
                                                                         settings):
    settings.DELAYQ = {**settings.DELAYQ, "QUEUE_OPTIONS": {"payments": {"concurrency": 2}}}
    client = staff_client("pause_queue")
    assert "payments" in _rows(client.get(_url()))
    _post(client, queue="payments", op="pause")
    assert delayq_engine.paused(["payments"]) == ["payments"]
