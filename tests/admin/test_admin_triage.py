"""The job admin for triage: list columns, search, filters, timed-out attempts, requeue
lineage both ways, and a LogEntry for every action."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.http import urlencode

from django_delayq import schedule
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.testing import run_due_jobs
from tests.helpers import burst

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = "django_delayq.exceptions.JobTimeout"


def _list(client: Client, query: str = "") -> tuple[list[str], str]:
    response = client.get(reverse("admin:django_delayq_job_changelist") + query)
    assert response.status_code == 200
    return [j.pk for j in response.context["cl"].result_list], response.content.decode()


def _page(client: Client, job_id: str) -> str:
    response = client.get(reverse("admin:django_delayq_job_change", args=(job_id,)))
    assert response.status_code == 200
    return response.content.decode()


def _act(client: Client, action: str, ids: list[str], **extra: str):  # type: ignore[no-untyped-def]
    data = {"action": action, "_selected_action": ids, "index": "0", **extra}
    return client.post(reverse("admin:django_delayq_job_changelist"), data, follow=True)


def _log(job_id: str) -> list[str]:
    return [e.change_message for e in LogEntry.objects.filter(object_id=job_id).order_by("pk")
            if e.action_flag == CHANGE]


def test_list_shows_lateness_short_error_and_seconds_on_one_line(delayq_settings,
                                                                  admin_client):
    job_id = schedule("tests.jobs.boom", "<b>x</b>" + "y" * 300, max_attempts=1).id
    run_due_jobs()
    due = timezone.now().replace(microsecond=0) - timedelta(seconds=3)
    Job.objects.filter(pk=job_id).update(priority=7, timeout=2.5, run_at=due,
                                         started_at=due + timedelta(milliseconds=1250))
    ids, html = _list(admin_client)
    assert ids == [job_id]
    row = html.split('class="field-status_badge"', 1)[1].split("</tr>", 1)[0]
    assert '<span title="%s tests.jobs.boom">boom <span class="delayq-module">tests.jobs</span>' % job_id in row
    assert '<td class="field-lateness_column">1.25 s</td>' in row
    assert "&lt;b&gt;x&lt;/b&gt;" in row and "<b>x</b>" not in row  # escaped
    assert "y" * 71 + "\u2026</span>" in row and "y" * 300 not in row  # cut, more on hover
    assert '<code title="builtins.RuntimeError">RuntimeError</code>' in row
    assert '>%s</time>' % timezone.localtime(due).strftime("%m-%d %H:%M:%S") in row
    page = _page(admin_client, job_id)  # the priority and time limit are on the job's page
    assert '<div class="readonly">7</div>' in page and '<div class="readonly">2.5 s</div>' in page


@pytest.mark.parametrize("error_type, stored, shown", [
    ("builtins.ValueError", "first line\nsecond <line>", "first line"),
    (TIMEOUT, "timed out: after 0.2 s\nin step 3", "after 0.2 s"),  # no "timed out" twice
])
def test_the_error_columns_title_is_the_messages_first_300_characters(
        delayq_settings, admin_client, error_type, stored, shown):
    """Hovering the list's error shows the message's first 300 characters, every line of
    them, on a timed-out row too; the cell shows its first line."""
    job_id = schedule("tests.jobs.noop", delay=3600).id
    message = stored + "z" * 400
    Job.objects.filter(pk=job_id).update(error_type=error_type, last_error=message)
    whole = message.removeprefix("timed out: ")
    title = escape(whole[:299] + "\u2026")
    row = _list(admin_client)[1].split('class="field-last_error_short"', 1)[1].split("</td>")[0]
    assert '<span title="%s">%s</span>' % (title, shown) in row, row


def test_search_by_error_text_and_type_and_filters(delayq_settings, admin_client):
    dead = schedule("tests.jobs.boom", "disk quota exceeded", max_attempts=1).id
    ok = schedule("tests.jobs.add", 1, 2).id
    later = schedule("tests.jobs.noop", delay=3 * 86400).id
    expired = schedule("tests.jobs.noop", delay=3600, queue="emails").id
    run_due_jobs()
    Job.objects.filter(pk=expired).update(status=JobStatus.EXPIRED)
    assert _list(admin_client, "?q=quota")[0] == [dead]
    assert _list(admin_client, "?q=RuntimeError")[0] == [dead]
    assert _list(admin_client, "?q=tests.jobs.add")[0] == [ok]
    assert _list(admin_client, "?status__exact=expired")[0] == [expired]
    assert _list(admin_client, "?queue=emails")[0] == [expired]
    assert _list(admin_client, "?callable_path=tests.jobs.noop")[0] in ([later, expired],
                                                                      [expired, later])
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    since = "?" + urlencode({"run_at__gte": str(today),  # the filter's "Today" link
                             "run_at__lt": str(today + timedelta(days=1))})
    assert later not in _list(admin_client, since)[0]
    assert dead in _list(admin_client, since)[0]
    html = _list(admin_client)[1]
    assert 'data-status="expired"' in html
    with_args = schedule("tests.jobs.noop", "order-8812", customer={"email": "ann@example.com"},
                         delay=3600).id
    assert _list(admin_client, "?q=order-8812")[0] == [with_args]  # a positional argument
    assert _list(admin_client, "?q=ann@example")[0] == [with_args]  # a keyword argument


def test_a_timed_out_attempt_is_marked_on_the_change_page(delayq_settings, admin_client,
                                                         tmp_path):
    """A real worker fails the attempt at its time limit (``JobTimeout``)."""
    job_id = schedule("tests.jobs.sleep_then_record", str(tmp_path / "out"), "slow", 1.0,
                      timeout=0.2, max_attempts=1).id
    assert burst() == 0
    job = Job.objects.get(pk=job_id)
    assert (job.status, job.error_type) == (JobStatus.DEAD, TIMEOUT)
    html = _page(admin_client, job_id)
    assert html.count('<span class="delayq-timeout">timed out</span>') == 2  # row, attempt
    assert "<code>%s</code>" % TIMEOUT in html
    assert '<div class="readonly">0.2 s</div>' in html  # the job's own time limit
    _ids, listing = _list(admin_client)
    assert 'class="delayq-timeout" title="%s">timed out</span>' % TIMEOUT in listing
    assert job.last_error.startswith("timed out")  # said once on the page and the list
    assert "timed out timed out" not in html and "timed out</span> timed out" not in listing
    assert "</code> timed out" not in html


def test_requeue_as_a_new_job_links_both_ways_and_is_logged(delayq_settings, admin_client):
    original = schedule("tests.jobs.add", 2, 3).id
    run_due_jobs()
    response = _act(admin_client, "requeue_jobs", [original])
    copy = Job.objects.exclude(pk=original).get(callable_path="tests.jobs.add")
    messages = [str(m) for m in response.context["messages"]]
    copy_url = reverse("admin:django_delayq_job_change", args=(copy.pk,))
    assert any('<a href="%s">%s</a>' % (copy_url, copy.pk) in m for m in messages)
    assert '<a href="%s">%s</a>' % (copy_url, copy.pk) in response.content.decode()
    assert _log(original) == ["Requeued as a new job %s." % copy.pk]
    assert copy.requeued_from == original
    back = _page(admin_client, copy.pk)
    original_url = reverse("admin:django_delayq_job_change", args=(original,))
    assert 'href="%s" class="delayq-job-link">%s</a>' % (original_url, original) in back
    forth = _page(admin_client, original)
    assert 'href="%s" class="delayq-job-link">%s</a>' % (copy_url, copy.pk) in forth


def test_lineage_lists_every_copy_of_an_original(delayq_settings, admin_client):
    original = schedule("tests.jobs.noop", delay=3600).id
    copies = [schedule("tests.jobs.noop", delay=3600).id for _ in range(2)]
    Job.objects.filter(pk__in=copies).update(requeued_from=original)
    html = _page(admin_client, original)
    lineage = html.split('class="delayq-lineage"', 1)[1].split("</ul>", 1)[0]
    assert all(c in lineage for c in copies)
    assert original in _page(admin_client, copies[0]).split("field-requeued_from_display")[1]


def test_the_attempt_table_marks_a_requeue_under_the_same_id(delayq_settings, admin_client):
    job_id = schedule("tests.jobs.boom", max_attempts=1).id
    run_due_jobs()
    _act(admin_client, "requeue_jobs", [job_id])
    assert Job.objects.get(pk=job_id).status == JobStatus.SCHEDULED
    run_due_jobs()
    assert Job.objects.get(pk=job_id).status == JobStatus.DEAD
    assert list(JobAttempt.objects.filter(job_id=job_id).order_by("pk")
                .values_list("number", flat=True)) == [1, 1]
    html = _page(admin_client, job_id)
    assert html.count('class="delayq-requeue-mark"') == 1
    assert _log(job_id) == ["Requeued with fresh attempts."]


def test_every_job_action_writes_a_log_entry(delayq_settings, admin_client):
    a, b, c = (schedule("tests.jobs.noop", delay=3600).id for _ in range(3))
    _act(admin_client, "run_jobs_now", [a])
    _act(admin_client, "reschedule_jobs", [b], apply="1", delay="7200")
    _act(admin_client, "cancel_jobs", [c])
    _act(admin_client, "cancel_jobs", [c])  # already cancelled: nothing changed, no entry
    assert _log(a) == ["Made due now (run now)."]
    [moved] = _log(b)  # the due time itself: "in 2:00:00" would mean nothing later
    logged = datetime.strptime(moved[len("Rescheduled: due "):][:19], "%Y-%m-%d %H:%M:%S")
    due = timezone.localtime(Job.objects.get(pk=b).run_at).replace(tzinfo=None)
    assert abs(logged - due) < timedelta(seconds=2) and moved.endswith(" UTC (in 2:00:00).")
    assert _log(c) == ["Cancelled."]
    entry = LogEntry.objects.get(object_id=c)
    assert entry.user.username == "admin" and entry.content_type.model == "job"
    history = admin_client.get(reverse("admin:django_delayq_job_history", args=(c,)))
    assert "Cancelled." in history.content.decode()
