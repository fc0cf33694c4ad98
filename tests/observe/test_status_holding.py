"""In flight = running + prefetched + settling: the same split, under the same names, in
``delayq_status`` (text and JSON), the admin's queues page and the live dashboard."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_delayq import schedule
from django_delayq.models import Job, JobStatus
from django_delayq.observe.redis_state import Holding, split
from tests.helpers import staff_client, wait_until
from tests.management.test_status import _start, _stop

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED = {"in_flight": 5, "running": 2, "prefetched": 1, "settling": 2}


def _hold_five(engine) -> None:
    """Five jobs leased in two queues; two workers report 2 running and 1 prefetched."""
    for queue, n in (("default", 3), ("emails", 2)):
        for _ in range(n):
            schedule("tests.jobs.noop", queue=queue)
        assert len(engine.claim(queue, n, lease_ms=60_000).jobs) == n
    engine.register_worker("w-1", json.dumps({"host": "a", "running": 1, "waiting": 1}))
    engine.register_worker("w-2", json.dumps({"host": "b", "running": 1, "waiting": True}))


def test_split_never_goes_negative_and_skips_missing_counts():
    assert split(3, [(1, None), (None, 1)]) == Holding(
        in_flight=3, running=1, prefetched=1, settling=1)
    assert split(1, [(2, 3)]).settling == 0  # worker info older than the inflight count


def test_split_always_adds_up_to_in_flight():
    """A worker's info is a heartbeat old: it may count jobs acknowledged since (or, with
    --queues, jobs of queues not shown). Running is capped at in flight, prefetched at
    what is left."""
    assert split(1, [(2, 3)]) == Holding(in_flight=1, running=1, prefetched=0, settling=0)
    assert split(0, [(1, 0)]) == Holding(in_flight=0, running=0, prefetched=0, settling=0)
    assert split(4, [(1, 5)]) == Holding(in_flight=4, running=1, prefetched=3, settling=0)


def test_a_stale_worker_is_listed_but_counts_in_no_split(delayq_engine):
    """A killed worker's registry entry stays (it never unregistered) with its last
    report: listed, flagged STALE, its jobs not counted as running or prefetched."""
    _hold_five(delayq_engine)
    delayq_engine.register_worker("gone", json.dumps({
        "host": "c", "running": 3, "waiting": 2,
        "jobs": [{"id": "01m82p8b0q4k3w1x2y3z4a5b6c", "queue": "default",
                  "callable": "tests.jobs.noop", "started_ms": 1}]}))
    registry = "{%s}:workers" % delayq_engine.prefix  # its last heartbeat: an hour ago
    delayq_engine.client.zadd(registry, {"gone": delayq_engine.time_ms() - 3_600_000})
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    doc = json.loads(out.getvalue())
    assert doc["holding"] == EXPECTED
    assert {w["id"]: w["stale"] for w in doc["workers"]} == {
        "gone": True, "w-1": False, "w-2": False}
    out = StringIO()
    call_command("delayq_status", stdout=out)
    text = out.getvalue()
    assert "IN FLIGHT 5 = 2 running + 1 prefetched + 2 settling" in text
    assert "(STALE)" in text and "running 01m82p8b0q4k3w1x2y3z4a5b6c" in text
    data = json.loads(staff_client().get(reverse("admin:django_delayq_job_dashboard_data"))
                      .content)
    assert data["holding"] == EXPECTED and len(data["workers"]) == 3


def test_delayq_status_splits_in_flight(delayq_engine):
    _hold_five(delayq_engine)
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    assert json.loads(out.getvalue())["holding"] == EXPECTED
    out = StringIO()
    call_command("delayq_status", stdout=out)
    text = out.getvalue()
    assert "IN FLIGHT 5 = 2 running + 1 prefetched + 2 settling" in text
    assert "running=1 prefetched=1" in text


def test_dashboard_and_queues_page_show_the_same_split(delayq_engine):
    _hold_five(delayq_engine)
    client = staff_client()
    data = json.loads(client.get(reverse("admin:django_delayq_job_dashboard_data")).content)
    assert data["holding"] == EXPECTED
    workers = {w["id"]: (w["running"], w["prefetched"]) for w in data["workers"]}
    assert workers == {"w-1": (1, 1), "w-2": (1, None)}
    html = client.get(reverse("admin:django_delayq_job_queues")).content.decode()
    for key, n in EXPECTED.items():
        assert '<b data-count="%s">%d</b>' % (key, n) in html


@pytest.mark.worker
def test_a_real_workers_jobs_add_up_the_same_everywhere(delayq_settings, tmp_path):
    """Three jobs that run until a gate opens, a worker of two threads: two running, the
    third due now or prefetched; delayq_status and the dashboard give the same split, and
    it adds up to the queue's in-flight count."""
    gate = tmp_path / "gate"
    ids = [schedule("tests.jobs.report_then_wait", i, str(gate)).id for i in range(3)]
    worker = _start(delayq_settings, tmp_path, "w-split", "--queues", "default",
                    "--concurrency", "2")
    try:
        wait_until(lambda: _holding()["running"] == 2, timeout=60)
        held = _holding()
        assert held["running"] + held["prefetched"] + held["settling"] == held["in_flight"]
        assert held["running"] == 2 and held["settling"] == 0
        client = staff_client()
        data = json.loads(client.get(reverse("admin:django_delayq_job_dashboard_data")).content)
        assert data["holding"] == held
        gate.touch()
        wait_until(lambda: all(Job.objects.get(pk=pk).status == JobStatus.SUCCEEDED
                               for pk in ids), timeout=60)
        wait_until(lambda: _holding() == {"in_flight": 0, "running": 0, "prefetched": 0,
                                          "settling": 0}, timeout=60)  # next heartbeat
    finally:
        gate.touch()
        _stop(worker)


def _holding() -> dict[str, int]:
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    return json.loads(out.getvalue())["holding"]  # type: ignore[no-any-return]
