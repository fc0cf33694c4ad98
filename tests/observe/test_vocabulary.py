"""One name per figure: the names of docs/admin.md's table are the ones the queues page,
the live dashboard, ``delayq_status`` and ``delayq_queue list`` show, and the old
second names (READY, INFLIGHT, "due" alone, a queue "running", "waiting=") are gone."""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_delayq import schedule
from tests.helpers import staff_client

pytestmark = pytest.mark.django_db(transaction=True)
DOC = Path(__file__).resolve().parents[2] / "docs" / "admin.md"
SECTION = "## One name for each state and count"


def _names() -> list[str]:
    text = DOC.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| \*\*([a-z ]+)\*\*", text, flags=re.MULTILINE)


def _run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_the_table_names_each_figure_once():
    names = _names()
    assert names == ["scheduled", "due now", "in flight", "running", "prefetched",
                     "settling", "dead", "active", "lateness"]


def test_the_admin_and_the_commands_use_the_tables_names(delayq_engine):
    schedule("tests.jobs.noop")
    delayq_engine.register_worker("w", json.dumps({"running": 0, "waiting": 0}))
    client = staff_client()
    queues = client.get(reverse("admin:django_delayq_job_queues")).content.decode().lower()
    dashboard = client.get(reverse("admin:django_delayq_job_dashboard")).content.decode()
    script = (Path(__file__).resolve().parents[2] / "django_delayq" / "static" /
              "django_delayq" / "dashboard.js").read_text()
    status, listing = _run("delayq_status"), _run("delayq_queue", "list")
    for name in ("scheduled", "due now", "in flight", "running", "prefetched", "settling",
                 "dead", "active"):
        assert name in queues, name
    for name in ("due now", "in flight", "running", "prefetched", "settling"):
        assert name in dashboard.lower(), name
    assert '"active"' in script and '"running", "delayq-queue-state"' not in script
    assert all(h in status for h in ("SCHEDULED", "DUE NOW", "IN FLIGHT", "DEAD",
                                     "prefetched=", "running + "))
    assert "READY" not in status and "INFLIGHT" not in status and "waiting=" not in status
    header = listing.splitlines()[0]
    assert "due now" in header and "in flight" in header
    assert "active" in listing
