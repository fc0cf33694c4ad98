"""An action on "all N jobs" across pages while another connection writes: each page of
rows is read in full before the action's first write on it, so no read stays open under a
write (on SQLite an open read keeps its snapshot, and the write after another
connection's commit then failed at once: "database is locked", the action half done)."""

from __future__ import annotations

from itertools import count

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.db.models.signals import post_save
from django.urls import reverse

from django_delayq import JobSpec, schedule_many
from django_delayq.admin import actions
from django_delayq.models import Job, JobStatus
from django_delayq.testing import run_due_jobs

pytestmark = pytest.mark.django_db(transaction=True)

LIST = reverse("admin:django_delayq_job_changelist")
JOBS = 2050  # past one chunk of QuerySet.iterator() (2000 rows)


def _another_connection_commits():  # type: ignore[no-untyped-def]
    """A receiver that commits a write from another connection to the same database when
    the action logs its first change (after its first job's write), then every 100th."""
    numbers = count()

    def commit(**_: object) -> None:
        if next(numbers) % 100:
            return
        other = connection.copy()  # a connection of its own, in autocommit
        try:
            with other.cursor() as cursor:
                cursor.execute("INSERT INTO auth_group (name) VALUES (%s)",
                               ["other %d" % next(numbers)])
        finally:
            other.close()
    return commit


def _across(client, query: str, action: str, first: str, **extra: str) -> list[str]:  # type: ignore[no-untyped-def]
    """``action`` on every job the list at ``query`` shows, while another connection
    commits; the messages it leaves."""
    commit = _another_connection_commits()
    post_save.connect(commit, sender=LogEntry, weak=False)
    try:
        response = client.post(LIST + query, {
            "action": action, "select_across": "1", "_selected_action": [first],
            "index": "0", **extra}, follow=True)
    finally:
        post_save.disconnect(commit, sender=LogEntry)
    return [str(m) for m in response.context["messages"]]


def test_cancel_across_pages_while_another_connection_commits(delayq_settings, admin_client):
    ids = schedule_many("tests.jobs.noop", (JobSpec(delay=3600) for _ in range(JOBS)))
    said = _across(admin_client, "?queue=default&status__exact=scheduled", "cancel_jobs", ids[0])
    assert said[0] == "%d cancelled." % JOBS
    assert Job.objects.filter(status=JobStatus.CANCELLED).count() == JOBS
    assert LogEntry.objects.count() == JOBS


@pytest.mark.parametrize("action, extra, outcome", [
    ("run_jobs_now", {}, "due now"),
    ("reschedule_jobs", {"apply": "1", "delay": "7200"}, "moved"),
])
def test_each_page_is_read_whole_before_its_writes(delayq_settings, admin_client, monkeypatch,
                                                   action, extra, outcome):
    monkeypatch.setattr(actions, "PAGE_ROWS", 2)
    ids = schedule_many("tests.jobs.noop", (JobSpec(delay=3600) for _ in range(5)))
    said = _across(admin_client, "?queue=default", action, ids[0], **extra)
    assert said[0] == "5 %s." % outcome
    assert LogEntry.objects.count() == 5


def test_pages_are_read_by_id_and_bounded(delayq_settings):
    ids = schedule_many("tests.jobs.noop", (JobSpec(delay=3600) for _ in range(7)))
    pages = list(actions.pages(Job.objects.all(), "callable_path", size=3))
    assert [len(page) for page in pages] == [3, 3, 1]
    assert [row[0] for page in pages for row in page] == sorted(ids)


def test_a_requeue_across_pages_does_not_reach_its_own_copies(delayq_settings, admin_client,
                                                              monkeypatch):
    """Read a page at a time, the action stops at the last job matching when it started:
    the new jobs a requeue makes (later ids, same callable) are not requeued in turn."""
    monkeypatch.setattr(actions, "PAGE_ROWS", 2)
    ids = schedule_many("tests.jobs.noop", (JobSpec() for _ in range(5)))
    run_due_jobs()
    response = admin_client.post(
        LIST + "?callable_path=tests.jobs.noop",
        {"action": "requeue_jobs", "select_across": "1", "_selected_action": [ids[0]],
         "index": "0"}, follow=True)
    said = [str(m) for m in response.context["messages"]]
    assert said[0] == "5 requeued as a new job."
    assert Job.objects.filter(callable_path="tests.jobs.noop").count() == 10
