"""The job list stays quick on a table of millions: no query of the page counts or reads
every row (no COUNT(*) but of a LIMIT subquery, no date hierarchy's DISTINCT or MIN/MAX
over the creation dates), and its pages reach the paginator's cap ("10000+")."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_delayq.admin.job_admin import JobAdmin
from django_delayq.admin.paging import CappedPaginator
from django_delayq.models import Job, JobStatus

pytestmark = pytest.mark.django_db

LIST = reverse("admin:django_delayq_job_changelist")


def _jobs(n: int) -> None:
    now = timezone.now()
    Job.objects.bulk_create(Job(
        id="list%022d" % i, queue="default", callable_path="tests.jobs.noop",
        status=JobStatus.SUCCEEDED if i % 2 else JobStatus.SCHEDULED, max_attempts=3,
        run_at=now, created_at=now - timedelta(days=i)) for i in range(n))


def _queries(client, query: str = "") -> list[str]:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as captured:
        assert client.get(LIST + query).status_code == 200
    return [q["sql"] for q in captured.captured_queries]


@pytest.mark.parametrize("query", ["", "?status__exact=succeeded", "?q=noop", "?p=2"])
def test_no_query_of_the_list_counts_or_reads_every_row(admin_client, query):
    _jobs(120)
    for sql in _queries(admin_client, query):
        upper = sql.upper()
        if "COUNT(" in upper:  # the paginator's, the status counts', the top groups'
            assert "LIMIT" in upper, sql
        assert not ("DISTINCT" in upper and "CREATED_AT" in upper), sql
        assert not re.search(r"(MIN|MAX)\([^)]*CREATED_AT", upper), sql


def test_pages_reach_the_cap_and_say_more(admin_client, monkeypatch):
    monkeypatch.setattr(CappedPaginator, "cap", 5)
    monkeypatch.setattr(JobAdmin, "list_per_page", 2)
    monkeypatch.setattr(JobAdmin, "list_max_show_all", 4)  # as 200 is under 10,000
    _jobs(8)
    page = admin_client.get(LIST)
    cl = page.context["cl"]
    assert (cl.result_count, cl.paginator.more, cl.paginator.num_pages) == (5, True, 3)
    html = page.content.decode()
    assert "5+ jobs" in html and "Select all 5+ jobs" in html and "All 5+ selected" in html
    assert 'class="showall"' not in html  # more rows than "show all" may list
    assert [j.pk for j in admin_client.get(LIST + "?p=3").context["cl"].result_list] == [
        "list%022d" % 4]
    assert admin_client.get(LIST + "?p=4").status_code == 302  # past the cap: ?e=1
    assert len(admin_client.get(LIST + "?all=").context["cl"].result_list) == 2
    filtered = admin_client.get(LIST + "?status__exact=scheduled").context["cl"]
    assert (filtered.result_count, filtered.paginator.more) == (4, False)


def test_under_the_cap_the_count_is_exact(admin_client):
    _jobs(3)
    page = admin_client.get(LIST)
    assert page.context["cl"].paginator.shown_count == "3"
    assert "3 jobs" in page.content.decode()
