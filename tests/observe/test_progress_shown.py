"""A running job's progress where people look: the job list (escaped), the dashboard's
running jobs and ``delayq_status`` (text and ``--json``), with a real worker running it."""

from __future__ import annotations

import json
import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_delayq import schedule
from django_delayq.core.progress import compact
from django_delayq.models import Job, JobStatus
from tests.helpers import burst, staff_client, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = {"step": "<b>3</b> of 10"}


def _status(*args: str) -> str:
    out = StringIO()
    call_command("delayq_status", *args, stdout=out)
    return out.getvalue()


def _dashboard_jobs(client) -> dict[str, dict[str, object]]:  # type: ignore[no-untyped-def]
    data = client.get(reverse("admin:django_delayq_job_dashboard_data")).json()
    return {job["id"]: job for w in data["workers"] for job in w["jobs"]}


def test_running_job_progress_in_list_dashboard_and_status(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    gate = tmp_path / "gate"
    h = schedule("tests.jobs.report_then_wait", HOSTILE, str(gate))
    worker = threading.Thread(target=burst, daemon=True)
    worker.start()
    try:
        wait_until(lambda: Job.objects.get(pk=h.id).progress == HOSTILE, timeout=60)
        wait_until(lambda: h.id in _status(), timeout=60)  # its worker's heartbeat lists it
        client = staff_client()
        page = client.get(reverse("admin:django_delayq_job_changelist")).content.decode()
        assert "&lt;b&gt;3&lt;/b&gt; of 10" in page and "<b>3</b>" not in page
        assert _dashboard_jobs(client)[h.id]["progress"] == compact(HOSTILE, 80)
        line = next(x for x in _status().splitlines() if h.id in x)
        assert line.endswith(', progress {"step":"<b>3</b> of 10"}')
        listed = [job for w in json.loads(_status("--json"))["workers"] for job in w["jobs"]]
        assert [job["progress"] for job in listed if job["id"] == h.id] == [HOSTILE]
    finally:
        gate.touch()
        worker.join(60)
    assert Job.objects.get(pk=h.id).status == JobStatus.SUCCEEDED


def test_compact_is_one_short_line() -> None:
    assert compact(None) == ""
    assert compact(0.25) == "0.25"
    assert compact("line one\nline two") == "line one line two"
    assert compact({"done": 3, "total": 10}) == '{"done":3,"total":10}'
    assert compact("x" * 100, 10) == "x" * 9 + "\u2026"
