"""End to end in a real headless Chromium: the live dashboard shows a running job's
progress (reported by the job in a real worker) as text, under its strict CSP.

Needs Debian's chromium and Playwright for Python (``.ci/install-browser.sh VENV``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from django_delayq import schedule
from django_delayq.models import Job, JobStatus
from tests.e2e.test_admin_browser import CHROMIUM, open_page
from tests.e2e.test_admin_dashboard_browser import HOSTILE, _stop, _worker

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no %s" % CHROMIUM),
    pytest.mark.django_db(transaction=True),
]


def _watch(page: Any, problems: list[str]) -> None:
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error"
            and not msg.location.get("url", "").endswith("/favicon.ico") else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))


def test_dashboard_shows_running_job_progress_as_text(  # type: ignore[no-untyped-def]
        delayq_settings, live_server, django_user_model, tmp_path: Path) -> None:
    django_user_model.objects.create_superuser("boss", "boss@example.com", "s3cret-pw")
    gate = tmp_path / "gate"
    # Scheduled before the browser starts: no ORM call works inside Playwright's loop.
    job_id = schedule("tests.jobs.report_then_wait", "half " + HOSTILE, str(gate)).id
    worker = _worker(delayq_settings, tmp_path)
    problems: list[str] = []
    try:
        with sync_api.sync_playwright() as pw:
            browser, page = open_page(
                pw, live_server.url, "/admin/django_delayq/job/dashboard/", timeout_ms=60_000,
                viewport={"width": 1280, "height": 900}, setup=lambda p: _watch(p, problems))
            try:
                shown = page.locator("li[data-job='%s'] .delayq-progress" % job_id)
                shown.wait_for()
                assert shown.inner_text().startswith("half <img src=x")  # text, not markup
                assert page.locator("#delayq-workers img, #delayq-workers script").count() == 0
                assert page.evaluate("window.pwned") is None
            finally:
                browser.close()
    finally:
        gate.touch()
        _stop(worker)
    assert Job.objects.get(pk=job_id).status == JobStatus.SUCCEEDED
    assert not problems, problems
