"""A real worker under group limits: a group limited to one job at a time never runs two
(measured by the jobs' own entry and exit times), and the queue's other groups run while
it waits: a refused group never blocks another."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from django_delayq import JobSpec, schedule_many, set_group_limit
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.helpers import wait_until
from tests.worker.test_runtime_limits import most_at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

SLOW_S = 1.0


def spans(path: Path) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for line in path.read_text().splitlines():
        tag, start, end = line.split()
        out.setdefault(tag, []).append((float(start), float(end)))
    return out


def test_a_limited_group_runs_one_at_a_time_while_the_others_run(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "QUEUE_OPTIONS": {"default": {"group_concurrency": 4}}}
    out = tmp_path / "spans.txt"
    set_group_limit("default", "slow", concurrency=1)
    ids = schedule_many("tests.jobs_more.hold", [JobSpec(args=(str(out), "slow", SLOW_S))
                                                 for _ in range(3)], group="slow")
    ids += schedule_many("tests.jobs_more.hold", [JobSpec(args=(str(out), "fast", 0.01))
                                                  for _ in range(30)], group="fast")
    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("default",), concurrency=6))
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        done = Job.objects.filter(id__in=ids, status=JobStatus.SUCCEEDED)
        wait_until(lambda: done.count() == len(ids), timeout=60, step=0.05)
    finally:
        worker.request_stop()
        thread.join(30)
    got = spans(out)
    assert most_at_once(got["slow"]) == 1  # its own limit, whatever the default
    assert 1 < most_at_once(got["fast"]) <= 4  # the queue's default for each group
    second_slow_start = sorted(start for start, _ in got["slow"])[1]
    assert max(end for _, end in got["fast"]) < second_slow_start + SLOW_S  # not blocked
    assert get_engine().group_slots("default") == {}
