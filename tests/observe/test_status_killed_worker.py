"""A SIGKILLed worker's job, recovered and finished by another worker: ``delayq_status``
still lists the killed worker (it never unregistered) with its last report, flagged
STALE, and the IN FLIGHT line adds up without it (docs/status.md). Real worker
subprocesses, the test database, a private redis-server, short leases."""

from __future__ import annotations

import json
import signal
from io import StringIO

import pytest
from django.core.management import call_command

from django_delayq import schedule
from django_delayq.models import Job, JobStatus
from tests.helpers import wait_until
from tests.management.test_status import _start, _stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def _status() -> dict:  # type: ignore[type-arg]
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def test_a_killed_workers_last_report_is_not_counted(delayq_settings, tmp_path):
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "LEASE_SECONDS": 2.0}
    gate = tmp_path / "gate"
    job_id = schedule("tests.jobs.report_then_wait", {"done": 20, "total": 20}, str(gate)).id
    killed = _start(delayq_settings, tmp_path, "w-killed", "--queues", "default",
                    "--concurrency", "1")
    try:
        wait_until(lambda: _status()["holding"]["running"] == 1, timeout=60)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    finally:
        _stop(killed)
    gate.touch()  # the next attempt returns at once
    other = _start(delayq_settings, tmp_path, "w-other", "--queues", "default")
    try:
        wait_until(lambda: Job.objects.get(pk=job_id).status == JobStatus.SUCCEEDED,
                   timeout=90, step=0.1)
        idle = {"in_flight": 0, "running": 0, "prefetched": 0, "settling": 0}
        wait_until(lambda: _status()["holding"] == idle, timeout=60, step=0.1)
        doc = _status()
        [gone] = [w for w in doc["workers"] if w["id"].startswith("w-killed")]
        assert gone["stale"] and gone["info"]["running"] == 1, gone
        assert [job["id"] for job in gone["jobs"]] == [job_id]  # its last report, listed
        out = StringIO()
        call_command("delayq_status", stdout=out)
        text = out.getvalue()
        assert "IN FLIGHT 0 = 0 running + 0 prefetched + 0 settling" in text, text
        assert "(STALE)" in text and "running %s" % job_id in text, text
    finally:
        _stop(other)
