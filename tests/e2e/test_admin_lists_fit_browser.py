"""End to end in a real headless Chromium at 1400 x 900: the job list and the schedules
list fit the page (no horizontal scrolling) with one line per row, long texts cut in the
cell and whole in its title. Screenshots of both (``DELAYQ_SCREENSHOT_DIR`` as in
test_admin_dashboard_browser)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from django_delayq.core import ids
from django_delayq.models import Job, JobStatus, Schedule
from tests.e2e.test_admin_browser import CHROMIUM, open_page
from tests.e2e.test_admin_dashboard_browser import _shots

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no %s" % CHROMIUM),
    pytest.mark.django_db(transaction=True),
]
LONG_ERROR = "the payment provider answered 503 Service Unavailable " * 8
LONG_PATH = "tests.jobs." + "very_long_function_name_" * 6 + "x"
VIEWPORT = {"width": 1400, "height": 900}

OVERFLOW = """() => {
  const doc = document.documentElement, box = document.querySelector('#changelist .results');
  const rows = [...document.querySelectorAll('#result_list tbody tr')];
  const heights = rows.map(r => Math.round(r.getBoundingClientRect().height));
  return {page: doc.scrollWidth - doc.clientWidth, box: box.scrollWidth - box.clientWidth,
          rows: rows.length, tallest: Math.max(...heights), lowest: Math.min(...heights)};
}"""


def _rows() -> None:
    """Jobs of every kind triage meets: dead with a long error, running with progress, a
    retry, scheduled, succeeded; a very long callable path."""
    now = timezone.now().replace(microsecond=0)
    kinds = [(JobStatus.DEAD, "tests.jobs.boom", "builtins.RuntimeError", LONG_ERROR),
             (JobStatus.RUNNING, "tests.jobs.report_then_wait", "", ""),
             (JobStatus.RETRYING, "tests.jobs.flaky", "builtins.ConnectionError", "reset"),
             (JobStatus.SCHEDULED, LONG_PATH, "", ""),
             (JobStatus.SUCCEEDED, "tests.jobs.add", "", "")]
    rows = []
    for i in range(4):
        for status, path, error_type, error in kinds:
            rows.append(Job(id=ids.new_id(), queue="emails" if i % 2 else "default",
                            callable_path=path, status=status, error_type=error_type,
                            last_error=error, run_at=now - timedelta(seconds=30 + i),
                            started_at=now - timedelta(seconds=29), attempts=2,
                            max_attempts=5, created_at=now - timedelta(minutes=i),
                            progress={"step": "3 of 10 " * 10}
                            if status == JobStatus.RUNNING else None))
    Job.objects.bulk_create(rows)


def _schedules() -> None:
    now = timezone.now().replace(microsecond=0)
    last = Job.objects.filter(status=JobStatus.DEAD).values_list("pk", flat=True)[0]
    Schedule.objects.create(last_job_id=last,name="nightly report for every shop in every region " * 2,
                            callable_path=LONG_PATH, cron="0 2 * * *",
                            time_zone="Europe/Berlin", next_tick_at=now + timedelta(hours=5),
                            last_tick_at=now - timedelta(hours=19), from_settings=True)
    Schedule.objects.create(name="heartbeat", callable_path="tests.jobs.noop",
                            interval_seconds=10, next_tick_at=now + timedelta(seconds=10),
                            last_tick_at=now)


def _fits(page: Any, path: str, url: str) -> dict[str, int]:
    page.goto(url + path)
    page.wait_for_selector("#result_list")
    return page.evaluate(OVERFLOW)


def test_the_job_and_schedule_lists_fit_1400_px(delayq_settings, live_server,
                                                django_user_model, tmp_path: Path) -> None:
    django_user_model.objects.create_superuser("boss", "boss@example.com", "s3cret-pw")
    _rows()
    _schedules()
    with sync_api.sync_playwright() as pw:
        browser, page = open_page(pw, live_server.url, "/admin/django_delayq/job/",
                                  timeout_ms=30_000, viewport=VIEWPORT)
        try:
            jobs = _fits(page, "/admin/django_delayq/job/", live_server.url)
            titles = page.eval_on_selector_all(
                "td.field-last_error_short code", "nodes => nodes.map(n => n.title)")
            page.screenshot(path=str(_shots(tmp_path) / "job-list.png"))
            schedules = _fits(page, "/admin/django_delayq/schedule/", live_server.url)
            page.screenshot(path=str(_shots(tmp_path) / "schedules.png"))
        finally:
            browser.close()
    assert jobs["rows"] == 20 and schedules["rows"] == 2
    for shown in (jobs, schedules):
        assert shown["page"] <= 0 and shown["box"] <= 0, shown  # no horizontal scrolling
        assert shown["tallest"] == shown["lowest"], shown  # one line per row
    assert "builtins.RuntimeError" in titles  # the class's dotted path, on hover
