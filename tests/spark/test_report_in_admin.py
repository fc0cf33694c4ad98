"""The admin's report pages on a report written by the real ``delayq_report`` (Spark)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_delayq import schedule
from django_delayq.testing import run_due_jobs
from tests.admin.test_admin_report import PAGE, _file_url
from tests.helpers import staff_client as _staff


@pytest.mark.django_db(transaction=True)
def test_a_real_delayq_report_is_listed_and_served(delayq_settings, tmp_path, spark):  # type: ignore[no-untyped-def]
    # ``spark``: the session's SparkContext (with the executors' environment) is the one
    # the commands below get; a JVM started here first would lack that environment.
    for i in range(3):
        schedule("tests.jobs.add", i, 1)
    run_due_jobs()
    root = tmp_path / "reports"
    call_command("delayq_export", "--out", str(tmp_path / "export"), "--settle", "0",
                 verbosity=0)
    call_command("delayq_report", "--input", str(tmp_path / "export"),
                 "--out", str(root / "today"))
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "REPORT_DIR": str(root)}
    client = _staff("view_report")
    response = client.get(reverse(PAGE))
    assert [r.name for r in response.context["reports"]] == ["today"]
    charts = dict(response.context["charts"])
    assert charts and all(name.endswith(".png") for name in charts)
    page = client.get(_file_url("today/report.html"))
    assert page.status_code == 200 and page["X-Content-Type-Options"] == "nosniff"
    assert b"tests.jobs.add" in b"".join(page.streaming_content)
    for url in charts.values():
        chart = client.get(url)
        assert chart.status_code == 200
        assert b"".join(chart.streaming_content).startswith(b"\x89PNG")
