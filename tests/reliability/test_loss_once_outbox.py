"""After a Redis outage ends, the jobs ``schedule()`` could not enqueue during it reach
Redis within seconds, not after ``RECONCILE_GRACE_SECONDS``: the worker's reconciler saw
Redis fail and answer again, and looks at the rows changed meanwhile at once (with the
second look). ``schedule()`` never waits long for a Redis that does not answer."""

from __future__ import annotations

import threading
import time

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.helpers import point_at, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_the_outbox_of_an_outage_drains_within_seconds_of_its_end(  # type: ignore[no-untyped-def]
        settings, fault_server) -> None:
    point_at(settings, fault_server, RECONCILE_GRACE_SECONDS=3600)  # not the grace
    worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",),
                                                                concurrency=2))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        first = schedule("tests.jobs.noop")
        wait_until(lambda: first.status == JobStatus.SUCCEEDED)
        fault_server.stop()  # AOF on: it comes back with its data
        wait_until(lambda: worker.housekeeping.reconciler._outage.since is not None, timeout=10)
        slowest, during = 0.0, []
        for _ in range(5):
            began = time.monotonic()
            during.append(schedule("tests.jobs.noop").id)  # Redis down: the outbox
            slowest = max(slowest, time.monotonic() - began)
        assert slowest < 1.5, slowest
        assert Job.objects.filter(pk__in=during, status=JobStatus.SCHEDULED).count() == 5
        fault_server.start()
        back = time.monotonic()
        wait_until(lambda: Job.objects.filter(
            pk__in=during, status=JobStatus.SUCCEEDED).count() == 5, timeout=30)
        assert time.monotonic() - back < 15
        assert worker.housekeeping.reconciler.stats.outage_passes >= 1
    finally:
        worker.request_stop()
        thread.join(30)
