"""A busy worker claims a job of priority above 0 when it comes due (worker/claiming.py,
UrgentTimer), not when a thread or room frees up, and starts it ahead of the jobs it had
already claimed.
Asserted by claim state and start order, not by milliseconds: a real worker, a real Redis."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def tags(path: Path) -> list[str]:
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def test_a_priority_job_due_while_the_worker_is_full_is_claimed_and_starts_next(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out, gate = tmp_path / "runs.txt", tmp_path / "gate"
    engine = get_engine()
    busy = schedule("tests.jobs.report_then_wait", "busy", str(gate))  # holds the one thread
    backlog = ["b%02d" % i for i in range(12)]
    for tag in backlog:
        schedule("tests.jobs.record", str(out), tag)
    worker = Worker(engine, get_settings(), WorkerOptions(queues=("default",), concurrency=1,
                                                          prefetch=4))
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        # the thread runs `busy` (jobs claimed at start-up may run before it), the others
        # wait claimed: no room, the main loop claims nothing
        wait_until(lambda: worker.claiming.capacity() <= 0 and busy.job.started_at, 60)
        # due in a moment, while nothing frees up: the wake message tells the urgent timer
        vip = schedule("tests.jobs.record", str(out), "vip", priority=10, delay=0.5)
        wait_until(lambda: engine.inspect("default", vip.id).place == "inflight", 60)
        before = tags(out)  # `busy` holds the one thread: nothing else starts meanwhile
        gate.touch()
        wait_until(lambda: len(tags(out)) == 13, 60)
    finally:
        gate.touch()
        worker.request_stop()
        thread.join(60)
    assert not thread.is_alive()
    runs = tags(out)
    assert runs[:len(before)] == before and runs[len(before)] == "vip"  # ahead of the backlog
    assert sorted(runs[:len(before)] + runs[len(before) + 1:]) == backlog
