"""The job list stays quick on a table of millions: no query of the page counts or reads
every row (no COUNT(*) but of a LIMIT subquery, no date hierarchy's DISTINCT or MIN/MAX
over the creation dates), and its pages reach the paginator's cap ("10000+")."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import parse_qs

import django
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone, translation

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


def _capped(monkeypatch, cap: int = 5, per_page: int = 2, show_all: int = 4) -> None:
    monkeypatch.setattr(CappedPaginator, "cap", cap)
    monkeypatch.setattr(JobAdmin, "list_per_page", per_page)
    monkeypatch.setattr(JobAdmin, "list_max_show_all", show_all)


def test_pages_reach_the_cap_and_say_more(admin_client, monkeypatch):
    _capped(monkeypatch)  # "show all" lists at most 4 rows, as 200 is under 10,000
    _jobs(8)
    page = admin_client.get(LIST)
    cl = page.context["cl"]
    assert (cl.result_count, cl.paginator.more, cl.paginator.num_pages) == (5, True, 3)
    html = page.content.decode()  # the count as Django shows one, and the note after it
    assert "5 jobs" in html and "Select all 5 jobs" in html and "All 5 selected" in html
    assert html.count("More than 5 jobs match: the list counts and shows the first 5.") == 2
    assert "the action applies to every job that matches, more than 5" in html
    assert 'class="showall"' not in html  # more rows than "show all" may list
    assert [j.pk for j in admin_client.get(LIST + "?p=3").context["cl"].result_list] == [
        "list%022d" % 4]
    assert len(admin_client.get(LIST + "?all=").context["cl"].result_list) == 2
    filtered = admin_client.get(LIST + "?status__exact=scheduled")
    assert (filtered.context["cl"].result_count, filtered.context["cl"].paginator.more) == (
        4, False)
    assert "More than" not in filtered.content.decode()


@pytest.mark.parametrize("per_page", [2, 50])
def test_show_all_is_refused_past_the_cap_whatever_may_be_shown(admin_client, monkeypatch,
                                                                per_page):
    _capped(monkeypatch, cap=4, per_page=per_page, show_all=200)  # the cap under both
    _jobs(8)
    for query in ("", "?all="):
        page = admin_client.get(LIST + query)
        assert [j.pk for j in page.context["cl"].result_list] == [
            "list%022d" % i for i in range(min(per_page, 4))]
        assert 'class="showall"' not in page.content.decode()
    assert len(admin_client.get(LIST + "?all=&status__exact=scheduled")
               .context["cl"].result_list) == 4  # under the cap: Django's "show all"


def test_a_page_past_the_cap_opens_the_last_with_the_same_filters(admin_client, monkeypatch):
    _capped(monkeypatch)
    _jobs(8)
    page = admin_client.get(LIST + "?queue__exact=default&q=noop&p=9")
    assert page.status_code == 302
    path, _mark, query = page["Location"].partition("?")
    assert (path, parse_qs(query)) == (LIST, {"queue__exact": ["default"], "q": ["noop"],
                                              "p": ["3"]})
    under = admin_client.get(LIST + "?status__exact=scheduled&p=9")  # 4 rows: 2 pages
    assert under["Location"] == LIST + "?p=2&status__exact=scheduled"
    assert admin_client.get(LIST + "?p=0")["Location"] == LIST + "?e=1"  # not a page


def test_the_list_is_djangos_own_markup(admin_client, monkeypatch):
    """Django's pagination, search form and actions bar, of the Django that runs."""
    _capped(monkeypatch)
    _jobs(8)
    page = admin_client.get(LIST)
    names = {t.name for t in page.templates}
    assert {"admin/pagination.html", "admin/search_form.html"} <= names
    assert not {n for n in names if n.startswith("admin/django_delayq/job/") and n.rsplit(
        "/", 1)[1] in ("pagination.html", "search_form.html")}
    html = page.content.decode()
    if django.VERSION >= (6,):
        assert '<nav class="paginator" aria-labelledby="pagination">' in html
        assert 'aria-labelledby="changelist-search-form"' in html
        assert 'class="action-counter" data-actions-icnt="2" aria-live="polite"' in html
        assert '<p class="paginator">' not in html
    else:
        assert '<p class="paginator">' in html


def test_the_counts_are_in_djangos_own_words(admin_client, monkeypatch, settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE[:1], "django.middleware.locale.LocaleMiddleware",
                           *settings.MIDDLEWARE[1:]]
    _capped(monkeypatch)
    _jobs(8)
    try:
        html = admin_client.get(LIST, headers={"accept-language": "fr"}).content.decode()
    finally:  # LocaleMiddleware leaves French active in this thread: later tests are not
        translation.deactivate()
    assert "Tous les 5 sélectionnés" in html and "5 résultats" in html
    assert "All 5 selected" not in html


def test_under_the_cap_the_count_is_exact(admin_client):
    _jobs(3)
    page = admin_client.get(LIST)
    assert page.context["cl"].paginator.more is False
    assert "3 jobs" in page.content.decode() and "More than" not in page.content.decode()
