"""End to end in a real headless Chromium: a job's page cancels the job through its
confirmation page; a dead job's page shows its traceback with the exception first; a
group member's page draws the group's graph; the queues page answers a purge without its
confirmation with a message. Screenshots of the dead job's page and of the graph
(``DELAYQ_SCREENSHOT_DIR`` as in test_admin_dashboard_browser)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from django_delayq import chain, group, job, schedule
from django_delayq.models import Job, JobStatus
from django_delayq.testing import run_due_jobs
from tests.e2e.test_admin_browser import CHROMIUM, open_page
from tests.e2e.test_admin_dashboard_browser import _shots

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no %s" % CHROMIUM),
    pytest.mark.django_db(transaction=True),
]
JOBS = "/admin/django_delayq/job/"


def test_job_page_buttons_traceback_and_purge_message(delayq_settings, live_server,
                                                      django_user_model, tmp_path: Path):
    django_user_model.objects.create_superuser("boss", "boss@example.com", "s3cret-pw")
    waiting = schedule("tests.jobs.noop", delay=3600).id
    dead = schedule("tests.jobs.boom", "card <b>declined</b>", max_attempts=1).id
    schedule("tests.jobs.noop", queue="emails", delay=3600)
    run_due_jobs()  # the dead one; the others are not due
    chain(job("tests.jobs.add").s(1, 2), job("tests.jobs.noop").s())
    fan = group([job("tests.jobs.add").s(i, i) for i in range(3)],
                then=job("tests.jobs.noop").s())
    run_due_jobs(max_jobs=2)  # the chain's first job and a member of the group
    with sync_api.sync_playwright() as pw:
        browser, page = open_page(pw, live_server.url, JOBS, timeout_ms=30_000,
                                  viewport={"width": 1400, "height": 900})
        try:
            page.goto(live_server.url + JOBS + waiting + "/change/")
            page.click("button[data-op=cancel]")
            asked = page.locator("#content").inner_text()
            page.click("input[value='Yes, cancel it']")
            page.wait_for_url("**%s%s/change/" % (JOBS, waiting))
            said = page.locator("ul.messagelist li").first.inner_text()
            page.goto(live_server.url + JOBS + dead + "/change/")
            exception = page.locator(".field-traceback_display .delayq-exception").inner_text()
            folded = page.locator(".field-traceback_display details").first.evaluate(
                "d => d.open")
            buttons = page.eval_on_selector_all("button[data-op]",
                                                "bs => bs.map(b => b.dataset.op)")
            page.screenshot(path=str(_shots(tmp_path) / "job-page.png"), full_page=True)
            page.goto(live_server.url + JOBS + fan.ids[0] + "/change/")
            graph = page.locator(".field-workflow_graph_display svg")
            drawn = graph.locator("a.delayq-node").count()
            box = graph.bounding_box()
            page.locator(".field-workflow_graph_display").screenshot(
                path=str(_shots(tmp_path) / "workflow.png"))
            page.goto(live_server.url + JOBS + "queues/")
            page.click("tr[data-queue=emails] button[value=purge]")
            purge = page.locator("ul.messagelist li").first.inner_text()
        finally:
            browser.close()
    assert "Cancel the job tests.jobs.noop" in asked
    assert said == "1 cancelled." and Job.objects.get(pk=waiting).status == JobStatus.CANCELLED
    assert exception == "RuntimeError: card <b>declined</b>"  # first, and as text
    assert folded is False and buttons == ["requeue"]
    assert purge == "Tick the box to confirm purging emails."
    assert drawn == 4 and box is not None and box["width"] > 300 and box["height"] > 100
    assert Job.objects.filter(queue="emails", status=JobStatus.SCHEDULED).count() == 1
