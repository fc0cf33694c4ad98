"""The live dashboard: a CSP-safe page, and the JSON it polls (queues, the last 15
minutes from the rows, the workers of the registry with their running jobs)."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_delayq import schedule
from django_delayq.admin import dashboard
from django_delayq.models import Job, JobStatus
from tests.helpers import staff_client

pytestmark = pytest.mark.django_db(transaction=True)


def _page_url() -> str:
    return reverse("admin:django_delayq_job_dashboard")


def _data(client: Client) -> dict:  # type: ignore[type-arg]
    response = client.get(reverse("admin:django_delayq_job_dashboard_data"))
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    return json.loads(response.content)


def test_the_page_is_csp_safe_and_loads_one_static_script(delayq_settings):
    response = staff_client().get(_page_url())
    assert response.status_code == 200
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy
    assert "unsafe-inline" not in policy
    html = response.content.decode()
    assert 'src="/static/django_delayq/dashboard.js"' in html
    body = html.split('id="content-main"', 1)[1]
    assert "style=" not in body and "<script" not in body and " on" + "load=" not in body
    assert not any(attr + quote + scheme in body for attr in ("src=", "href=")
                   for quote in "\"'" for scheme in ("http:", "https:", "//"))


def test_both_views_need_the_view_permission(delayq_settings):
    user = User.objects.create_user("nobody", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get(_page_url()).status_code == 403
    assert client.get(reverse("admin:django_delayq_job_dashboard_data")).status_code == 403


def test_data_has_queue_counts_and_paused_state(delayq_engine):
    schedule("tests.jobs.noop", queue="emails")
    schedule("tests.jobs.noop", queue="emails", delay=3600)
    delayq_engine.pause("emails")
    data = _data(staff_client())
    emails = {q["queue"]: q for q in data["queues"]}["emails"]
    assert (emails["due_now"], emails["scheduled"], emails["paused"]) == (1, 1, True)
    assert emails["next_due_ms"] > data["now_ms"] + 3_500_000
    assert len(data["minutes"]) == dashboard.WINDOW_MINUTES and data["redis_error"] is None


def test_workers_with_their_running_jobs_as_the_registry_has_them(delayq_engine):
    now_ms = delayq_engine.time_ms()
    info = {"host": "box-1", "pid": 4242, "processes": 4, "supervisor": None,
            "jobs": [{"id": "01job", "queue": "default", "callable": "<img src=x>",
                      "started_ms": now_ms - 5000}, "not a job", {"queue": "no id"}]}
    delayq_engine.register_worker("w-1", json.dumps(info))
    delayq_engine.register_worker("w-2", "[not, json")
    workers = {w["id"]: w for w in _data(staff_client())["workers"]}
    one = workers["w-1"]
    assert (one["host"], one["pid"], one["processes"]) == ("box-1", 4242, 4)
    assert 0 <= one["heartbeat_age_s"] < 60
    [job] = one["jobs"]
    assert job["id"] == "01job" and job["callable"] == "<img src=x>"  # data; the script
    assert 4.5 <= job["age_s"] < 60                                  # shows it as text
    assert workers["w-2"]["malformed"] and workers["w-2"]["jobs"] == []


def _finished(minutes_ago: float, late_ms: float, *, status: str = JobStatus.SUCCEEDED,
              due_hours_ago: float | None = None) -> str:
    job_id = schedule("tests.jobs.noop", delay=3600).id
    now = timezone.now()
    start = now - timedelta(minutes=minutes_ago)
    due = (start - timedelta(milliseconds=late_ms) if due_hours_ago is None
           else now - timedelta(hours=due_hours_ago))
    Job.objects.filter(pk=job_id).update(status=status, run_at=due, started_at=start,
                                         finished_at=start + timedelta(milliseconds=10))
    return job_id


def test_last_minutes_count_finished_jobs_and_lateness_percentiles(delayq_settings):
    for late in (10, 20, 30, 40, 1000):
        _finished(0, late)
    _finished(5, 100, status=JobStatus.DEAD)
    _finished(20, 5)  # before the window
    _finished(1, 5, status=JobStatus.CANCELLED)  # never ran: not a finished run
    _finished(0, 5, due_hours_ago=3)  # due before the bounded range: left out
    past = dashboard.last_minutes(timezone.now())
    assert sum(m["finished"] for m in past["minutes"]) == 6
    current = past["minutes"][-1]
    if current["finished"] == 5:  # the minute did not turn while the rows were written
        assert (current["p50_ms"], current["p95_ms"]) == pytest.approx((30, 1000), abs=1)
    assert max(m["p95_ms"] or 0 for m in past["minutes"]) == pytest.approx(1000, abs=1)
    assert not past["sampled"]


def test_percentile_is_nearest_rank():
    assert dashboard.percentile([], 0.5) is None
    assert dashboard.percentile([1.0], 0.95) == 1.0
    values = [float(v) for v in range(1, 101)]
    assert dashboard.percentile(values, 0.5) == 50 and dashboard.percentile(values, 0.95) == 95


@pytest.mark.skipif(os.environ.get("DELAYQ_TEST_DB") == "postgres",
                    reason="a plan on a tiny PostgreSQL table may be a sequential scan")
def test_the_chart_queries_go_through_the_status_run_at_index(delayq_settings):
    now = timezone.now()
    query = Job.objects.filter(status__in=dashboard.FINISHED, finished_at__gte=now,
                               run_at__gte=now - dashboard.DUE_LOOKBACK, run_at__lte=now)
    assert "delayq_status_run_at" in query.explain()
