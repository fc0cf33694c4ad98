"""Workflows at the surface: the job page lists parents and children with links and
shows why a child was cancelled; ``delayq_status`` counts the waiting jobs per queue."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_delayq import cancel, schedule
from django_delayq.core.connection import get_engine
from tests import jobs
from tests.helpers import point_at, staff_client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, ALLOWED_CALLABLES=["tests.jobs"])
    return get_engine()


def page(client, job_id: str) -> str:  # type: ignore[no-untyped-def]
    response = client.get(reverse("admin:django_delayq_job_change", args=(job_id,)))
    assert response.status_code == 200
    return response.content.decode()


def test_the_job_page_links_parents_and_children_and_names_the_cancelling_parent(dq) -> None:  # type: ignore[no-untyped-def]
    a = schedule(jobs.noop, delay=3600)
    b = schedule(jobs.noop, delay=3600)
    c = schedule(jobs.noop, after=[a, b])
    client = staff_client()
    child_page = page(client, c.id)
    assert "Workflow" in child_page and "Waits for" in child_page
    for parent in (a.id, b.id):
        assert reverse("admin:django_delayq_job_change", args=(parent,)) in child_page
    assert child_page.count("waited for</span>") == 2
    assert reverse("admin:django_delayq_job_change", args=(c.id,)) in page(client, a.id)
    cancel(a.id)
    child_page = page(client, c.id)
    assert "parent %s ended cancelled" % a.id in child_page
    assert child_page.count("waited for</span>") == 1  # b still runs; a is resolved


def test_the_job_list_counts_waiting_jobs(dq) -> None:  # type: ignore[no-untyped-def]
    a = schedule(jobs.noop, delay=3600)
    schedule(jobs.noop, after=[a])
    response = staff_client().get(reverse("admin:django_delayq_job_changelist"))
    assert response.status_code == 200
    assert "waiting" in response.content.decode()


def test_delayq_status_shows_the_waiting_count_per_queue(dq) -> None:  # type: ignore[no-untyped-def]
    a = schedule(jobs.noop, delay=3600)
    for _ in range(3):
        schedule(jobs.noop, after=[a])
    schedule(jobs.noop, after=[a], queue="emails")
    out = StringIO()
    call_command("delayq_status", stdout=out)
    assert "waiting for their parents (not in Redis yet): 3" in out.getvalue()
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    counts = {q["queue"]: q["waiting"] for q in json.loads(out.getvalue())["queues"]}
    assert counts["default"] == 3 and counts["emails"] == 1
