"""End to end: a real headless Chromium logs into the admin and cancels a job.

Needs Debian's chromium and Playwright for Python (``.ci/install-browser.sh VENV``);
skipped where either is missing. ``playwright install`` is never used: the test
drives /usr/bin/chromium.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import pytest

from django_delayq import schedule
from django_delayq.models import Job, JobStatus

CHROMIUM = os.environ.get("DELAYQ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]

sync_api = pytest.importorskip("playwright.sync_api")
LAUNCHES = 3  # a browser that dies on its way to the first page is launched again


def login(page: Any, url: str, next_path: str) -> None:
    page.goto(url + "/admin/login/?next=" + next_path)
    page.fill("#id_username", "boss")
    page.fill("#id_password", "s3cret-pw")
    page.click("input[type=submit]")
    page.wait_for_url("**" + next_path)


def open_page(pw: Any, url: str, next_path: str, *, timeout_ms: int,
              viewport: dict[str, int] | None = None,
              setup: Callable[[Any], None] | None = None) -> tuple[Any, Any]:
    """(browser, page): Chromium launched, a page logged in as boss at ``next_path``.

    A Chromium process that dies before the first page is shown ("Target page, context
    or browser has been closed": seen on a loaded CI host) is launched again, up to
    ``LAUNCHES`` times; any other error (a timeout, a page that does not load) fails the
    test at once."""
    for launch in range(LAUNCHES):
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(**({"viewport": viewport} if viewport else {}))
            page.set_default_timeout(timeout_ms)
            if setup is not None:
                setup(page)
            login(page, url, next_path)
        except sync_api.Error as exc:
            with contextlib.suppress(sync_api.Error):  # it may be gone already
                browser.close()
            if "has been closed" not in str(exc) or launch == LAUNCHES - 1:
                raise
        else:
            return browser, page
    raise AssertionError("unreachable")


pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no %s" % CHROMIUM),
    pytest.mark.django_db(transaction=True),
]


def test_cancel_a_job_from_the_admin_in_a_browser(delayq_settings, live_server,
                                                  django_user_model):
    django_user_model.objects.create_superuser("boss", "boss@example.com", "s3cret-pw")
    job_id = schedule("tests.jobs.add", 1, 2, delay=3600).id
    other = schedule("tests.jobs.add", 3, 4, delay=3600).id

    with sync_api.sync_playwright() as pw:
        browser, page = open_page(pw, live_server.url, "/admin/django_delayq/job/",
                                  timeout_ms=15_000)
        try:
            assert page.locator("li.delayq-count[data-status=scheduled] b").inner_text() == "2"

            page.check("input[name=_selected_action][value='%s']" % job_id)
            page.select_option("select[name=action]", "cancel_jobs")
            page.click("button[name=index]")
            message = page.locator("ul.messagelist li").first.inner_text()
            cancelled = page.locator("li.delayq-count[data-status=cancelled] b").inner_text()
        finally:
            browser.close()

    assert message == "1 cancelled."
    assert cancelled == "1"
    assert Job.objects.get(pk=job_id).status == JobStatus.CANCELLED
    assert Job.objects.get(pk=other).status == JobStatus.SCHEDULED
