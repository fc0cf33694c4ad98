"""End to end in a real headless Chromium: the live dashboard shows a running job of a
real worker and updates without a reload, under its strict CSP, with hostile texts from
Redis shown as text; the queues page pauses a queue; screenshots of the dashboard and
the queues page (the job list's: test_admin_lists_fit_browser).

Screenshots go to ``DELAYQ_SCREENSHOT_DIR`` when set (``docs/img`` to refresh the ones
in docs/admin.md), else to the test's temporary directory.
Needs Debian's chromium and Playwright for Python (``.ci/install-browser.sh VENV``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core import ids
from django_delayq.models import Job, JobStatus
from django_delayq.testing import run_due_jobs
from tests.e2e.test_admin_browser import CHROMIUM, open_page
from tests.worker.conftest import ROOT, worker_env

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no %s" % CHROMIUM),
    pytest.mark.django_db(transaction=True),
]
HOSTILE = "<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>"


def _shots(tmp_path: Path) -> Path:
    return Path(os.environ.get("DELAYQ_SCREENSHOT_DIR") or tmp_path)


def _worker(settings: Any, tmp_path: Path) -> subprocess.Popen[bytes]:
    log = open(tmp_path / "worker.log", "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "django", "delayq_worker", "--worker-id", "web-1",
         "--queues", "default", "--concurrency", "2"],
        cwd=ROOT, env=worker_env(settings), stdout=log, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _history(minutes: int = 14) -> int:
    """Audit rows of jobs that ran in the last minutes (their Redis part long gone), with
    a few late starts: what the charts draw. Returns how many."""
    now = timezone.now()
    rows = []
    for minute in range(minutes):
        for i in range(2 + (minute * 5) % 7):
            start = now - timedelta(minutes=minute, seconds=5 + i)
            late = timedelta(milliseconds=3 + (i * 37 + minute * 11) % 90 + (900 if i == 0 else 0))
            rows.append(Job(id=ids.new_id(), queue="default", callable_path="tests.jobs.noop",
                            status=JobStatus.SUCCEEDED, run_at=start - late, started_at=start,
                            finished_at=start + timedelta(milliseconds=20), attempts=1,
                            max_attempts=3, created_at=start - late))
    Job.objects.bulk_create(rows)
    return len(rows)


def test_dashboard_shows_a_running_job_and_updates_without_reload(
        delayq_settings, delayq_engine, live_server, django_user_model, tmp_path):
    django_user_model.objects.create_superuser("boss", "boss@example.com", "s3cret-pw")
    delayq_engine.register_worker("planted", json.dumps({
        "host": HOSTILE, "pid": 1, "processes": 1,
        "jobs": [{"id": "01planted", "queue": "default", "callable": HOSTILE,
                  "started_ms": delayq_engine.time_ms()}]}))
    for _ in range(3):
        schedule("tests.jobs.noop", queue="emails", delay=3600)
    before = _history()
    # Scheduled now (no ORM call works inside Playwright's event loop); the worker that
    # runs it starts once the page is up, so the page can only learn of it by polling.
    job_id = schedule("tests.jobs.sleep_then_record", str(tmp_path / "out"), "slow", 8).id
    worker = None
    problems: list[str] = []
    with sync_api.sync_playwright() as pw:
        def watch(page: Any) -> None:
            page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error"
                    and not msg.location.get("url", "").endswith("/favicon.ico") else None)
            page.on("pageerror", lambda exc: problems.append(str(exc)))

        browser, page = open_page(pw, live_server.url, "/admin/django_delayq/job/dashboard/",
                                  timeout_ms=30_000, viewport={"width": 1280, "height": 900},
                                  setup=watch)
        try:
            page.wait_for_selector(".delayq-dashboard[data-polls]")
            page.evaluate("window.delayqNoReload = true")
            assert page.locator("#delayq-queues tr[data-queue=emails] "
                                "td[data-count=scheduled]").inner_text() == "3"
            assert page.get_attribute("#delayq-throughput", "data-total") == str(before)
            assert page.locator("#delayq-queues tr[data-queue=default] "
                                "td[data-count=due_now]").inner_text() == "1"

            worker = _worker(delayq_settings, tmp_path)
            running = page.locator("li[data-job='%s']" % job_id)
            running.wait_for()
            link = running.locator("a.delayq-job-link")
            assert link.get_attribute("href") == "/admin/django_delayq/job/%s/change/" % job_id
            assert "tests.jobs.sleep_then_record" in running.inner_text()
            assert page.locator("#delayq-queues tr[data-queue=default] "
                                "td[data-count=inflight]").inner_text() == "1"
            planted = page.locator("tr[data-worker=planted]")
            assert HOSTILE in planted.inner_text()  # shown as text, not markup
            assert page.locator("#delayq-workers img, #delayq-workers script").count() == 0
            page.screenshot(path=str(_shots(tmp_path) / "dashboard.png"), full_page=True)

            running.wait_for(state="detached", timeout=60_000)
            page.wait_for_function("Number(document.getElementById('delayq-throughput')"
                                   ".getAttribute('data-total')) >= %d" % (before + 1),
                                   timeout=30_000)
            assert page.locator("#delayq-lateness circle.delayq-line-p95-dot").count() >= 10
            assert page.evaluate("window.delayqNoReload") is True
            assert page.evaluate("window.pwned") is None
        finally:
            browser.close()
            if worker is not None:
                _stop(worker)
    assert Job.objects.get(pk=job_id).status == JobStatus.SUCCEEDED
    assert not problems, problems  # a CSP violation is reported as a console error


def test_queues_page_pauses_a_queue_and_the_job_list(
        delayq_settings, delayq_engine, live_server, django_user_model, tmp_path):
    django_user_model.objects.create_superuser("boss", "boss@example.com", "s3cret-pw")
    for i in range(4):
        schedule("tests.jobs.add", i, 1, queue="emails", delay=60 * (i + 1), priority=i)
    schedule("tests.jobs.noop", queue="slow", timeout=30)
    failed = schedule("tests.jobs.boom", "upstream returned 503", max_attempts=1).id
    schedule("tests.jobs.add", 20, 22)
    assert run_due_jobs(["default"]) == 2
    delayq_engine.set_queue_limit("emails", rate=(100, 60_000), concurrency=5)
    with sync_api.sync_playwright() as pw:
        browser, page = open_page(pw, live_server.url, "/admin/django_delayq/job/queues/",
                                  timeout_ms=30_000, viewport={"width": 1280, "height": 800})
        try:
            page.click("tr[data-queue=slow] button[value=pause]")
            message = page.locator("ul.messagelist li").first.inner_text()
            state = page.locator("tr[data-queue=slow] .delayq-queue-state").inner_text()
            page.screenshot(path=str(_shots(tmp_path) / "queues.png"), full_page=True)
            page.goto(live_server.url + "/admin/django_delayq/job/")
            error = page.locator("td.field-last_error_short", has_text="upstream returned 503")
            error.wait_for()
            linked = error.locator("xpath=..").locator(".field-job_column a").get_attribute(
                "href")
        finally:
            browser.close()
    assert linked == "/admin/django_delayq/job/%s/change/" % failed
    assert message == "Paused queue slow."
    assert state == "paused"
    assert delayq_engine.paused(["slow", "emails"]) == ["slow"]
