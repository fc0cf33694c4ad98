"""Prometheus metrics: signal-fed counters and histograms, queue depth gauges read at
scrape time, served by the Django view and by the worker's HTTP server."""

from __future__ import annotations

import urllib.request

import pytest
from django.test import RequestFactory

from django_delayq import compat, schedule
from django_delayq.testing import run_due_jobs

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(compat.prometheus_client is None, reason="no prometheus")]


@pytest.fixture
def m(delayq_settings):  # type: ignore[no-untyped-def]
    from django_delayq.observe import prometheus

    return prometheus


def value(m, name: str, **labels: str) -> float:  # type: ignore[no-untyped-def]
    return m.REGISTRY.get_sample_value(name, labels) or 0.0


def test_counters_and_histograms_follow_the_jobs(m):
    before = {
        "scheduled": value(m, "delayq_jobs_scheduled_total", queue="slow"),
        "ok": value(m, "delayq_jobs_finished_total", queue="slow", status="succeeded"),
        "dead": value(m, "delayq_jobs_finished_total", queue="slow", status="dead"),
        "retries": value(m, "delayq_job_retries_total", queue="slow"),
        "started": value(m, "delayq_jobs_started_total", queue="slow"),
        "late": value(m, "delayq_job_lateness_seconds_count", queue="slow"),
        "dur": value(m, "delayq_job_duration_seconds_count", queue="slow"),
    }
    schedule("tests.jobs.add", 1, 2, queue="slow")
    schedule("tests.jobs.boom", queue="slow", max_attempts=2, backoff=[0])
    assert run_due_jobs(["slow"]) == 3
    assert value(m, "delayq_jobs_scheduled_total", queue="slow") == before["scheduled"] + 2
    assert value(m, "delayq_jobs_started_total", queue="slow") == before["started"] + 3
    assert value(m, "delayq_jobs_finished_total", queue="slow",
                 status="succeeded") == before["ok"] + 1
    assert value(m, "delayq_jobs_finished_total", queue="slow", status="dead") == before["dead"] + 1
    assert value(m, "delayq_job_retries_total", queue="slow") == before["retries"] + 1
    assert value(m, "delayq_job_lateness_seconds_count", queue="slow") == before["late"] + 3
    assert value(m, "delayq_job_duration_seconds_count", queue="slow") == before["dur"] + 1


def test_a_success_settled_from_redis_record_counts_without_a_duration(m, caplog):
    """The reconciler settles a row from Redis's settled record with ``duration=None``
    (the run was not timed): counted as succeeded, no duration observed."""
    from django_delayq import signals

    ok = value(m, "delayq_jobs_finished_total", queue="slow", status="succeeded")
    dur = value(m, "delayq_job_duration_seconds_count", queue="slow")
    signals.send(signals.job_succeeded, job_id="j", queue="slow", callable_path="tests.jobs.add",
                 attempt=1, worker_id="w", result=None, duration=None)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
    assert value(m, "delayq_jobs_finished_total", queue="slow", status="succeeded") == ok + 1
    assert value(m, "delayq_job_duration_seconds_count", queue="slow") == dur


def test_queue_depth_gauges_are_read_from_redis_at_scrape(m):
    for _ in range(3):
        schedule("tests.jobs.noop", delay=3600, queue="emails")
    schedule("tests.jobs.noop", queue="emails")
    assert value(m, "delayq_queue_jobs", queue="emails", state="scheduled") == 3
    assert value(m, "delayq_queue_jobs", queue="emails", state="ready") == 1
    assert value(m, "delayq_queue_jobs", queue="default", state="scheduled") == 0
    assert value(m, "delayq_queue_oldest_ready_age_seconds", queue="emails") >= 0
    assert value(m, "delayq_redis_up") == 1
    run_due_jobs(["emails"])
    assert value(m, "delayq_queue_jobs", queue="emails", state="ready") == 0


def test_scrape_says_redis_down_instead_of_failing(m, delayq_settings):
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    assert value(m, "delayq_redis_up") == 0
    assert m.REGISTRY.get_sample_value("delayq_queue_jobs",
                                       {"queue": "default", "state": "ready"}) is None


def test_an_error_redis_answers_is_no_partial_scrape(m, delayq_engine):
    """WRONGTYPE on a queue's limit key is no node loss: the scrape says Redis is not read
    (``delayq_redis_up 0``) instead of leaving that queue's gauges out."""
    delayq_engine.client.set(delayq_engine.keys("default").limit, "not a hash")
    assert value(m, "delayq_redis_up") == 0


def test_django_view_serves_the_text_format(m):
    from django_delayq.metrics_views import metrics

    schedule("tests.jobs.noop", delay=60)
    response = metrics(RequestFactory().get("/metrics"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert 'delayq_queue_jobs{queue="default",state="scheduled"} 1.0' in text
    assert "delayq_jobs_scheduled_total" in text
    assert metrics(RequestFactory().post("/metrics")).status_code == 405


def test_worker_http_server(m):
    server = m.start_http_server(0, addr="127.0.0.1")
    try:
        url = "http://127.0.0.1:%d/metrics" % server.server_address[1]
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        assert "delayq_redis_up 1.0" in text
        assert "delayq_job_lateness_seconds_bucket" in text
    finally:
        server.shutdown()
        server.server_close()


def test_bulk_scheduling_is_counted(m):  # type: ignore[no-untyped-def]
    from django_delayq.core.api import JobSpec, schedule_many

    before = value(m, "delayq_jobs_scheduled_total", queue="emails")
    schedule_many("tests.jobs.add", [JobSpec(args=(i, 1), key="k%d" % i) for i in range(5)],
                  queue="emails")
    schedule_many("tests.jobs.add", [JobSpec(args=(i, 1), key="k%d" % i) for i in range(7)],
                  queue="emails")  # a replay: only the two new keys are scheduled
    assert value(m, "delayq_jobs_scheduled_total", queue="emails") == before + 7


def test_paused_gauge_limits_and_running_per_limited_callable(m, delayq_engine, settings):
    settings.DELAYQ = {**settings.DELAYQ, "CALLABLE_LIMITS": {
        "tests.jobs.add": {"rate_limit": "10/s", "concurrency": 2}}}
    delayq_engine.pause("emails")
    delayq_engine.set_queue_limit("default", rate=(120, 60_000), concurrency=5)
    assert value(m, "delayq_queue_paused", queue="emails") == 1
    assert value(m, "delayq_queue_paused", queue="default") == 0
    assert value(m, "delayq_queue_rate_limit_per_second", queue="default") == 2.0
    assert value(m, "delayq_queue_concurrency_limit", queue="default") == 5
    assert m.REGISTRY.get_sample_value("delayq_queue_concurrency_limit",
                                       {"queue": "emails"}) is None  # no limit: no sample
    assert value(m, "delayq_callable_rate_limit_per_second", callable="tests.jobs.add") == 10
    assert value(m, "delayq_callable_concurrency_limit", callable="tests.jobs.add") == 2
    assert value(m, "delayq_callable_running", callable="tests.jobs.add") == 0
    assert delayq_engine.acquire("tests.jobs.add", "01a", lease_ms=60_000, rate=(10, 1000),
                                 concurrency=2).granted
    assert value(m, "delayq_callable_running", callable="tests.jobs.add") == 1
    delayq_engine.resume("emails")
    assert value(m, "delayq_queue_paused", queue="emails") == 0
