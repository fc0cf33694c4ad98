"""After a Redis outage ends, the jobs ``schedule()`` could not enqueue during it reach
Redis within seconds, not after ``RECONCILE_GRACE_SECONDS``: the worker's reconciler saw
Redis fail and answer again, and looks at the rows changed meanwhile at once (with the
second look), and again until no web process can still be backing off Redis, so the
rows a web process leaves after Redis answered run as soon. ``schedule()`` never waits
long for a Redis that does not answer."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from tests import jobs_chaos
from tests.helpers import point_at, wait_until
from tests.reliability.conftest import stop

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


def test_rows_left_while_a_web_process_still_backs_off_run_within_seconds(  # type: ignore[no-untyped-def]
        cfg, start_with, fault_server) -> None:
    """This process is the web process, a real ``delayq_worker`` the other. Redis stops:
    this process's sends fail until its backoff of the queue reaches the longest (5 s).
    Redis answers again, and the ``schedule()`` calls of the rest of that backoff skip the
    send without trying: their rows stay in the outbox, written after the worker saw
    Redis answer. Every row of the outage and of the backoff runs, once, seconds after
    Redis is back, not after ``RECONCILE_GRACE_SECONDS``."""
    point_at(cfg, fault_server)
    worker = start_with({"RECONCILE_GRACE_SECONDS": 3600}, "--concurrency", "4")
    engine = get_engine()
    first = schedule("tests.jobs_chaos.record", "first")
    wait_until(lambda: first.status == JobStatus.SUCCEEDED, timeout=60)
    fault_server.stop()  # AOF on: it comes back with its data
    during: list[str] = []

    def backed_off_longest() -> bool:
        during.append(schedule("tests.jobs_chaos.record", "during").id)  # the outbox
        return engine.health.remaining_ms("default") > 4000

    wait_until(backed_off_longest, timeout=60, step=0.05)
    fault_server.start()
    back = time.monotonic()
    after: list[str] = []
    skipped: list[bool] = []

    def backoff_over() -> bool:
        if not engine.health.down("default"):
            return True
        after.append(schedule("tests.jobs_chaos.record", "after").id)
        skipped.append(engine.inspect("default", after[-1]).place == "")  # not sent
        return False

    wait_until(backoff_over, timeout=30, step=0.2)
    assert sum(skipped) >= 5, skipped  # written after Redis answered, left in the outbox
    ids = during + after
    wait_until(lambda: Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count()
               == len(ids), timeout=45)
    took = time.monotonic() - back
    assert took < 30, took  # the grace pass would take 3600 s here (60 s by default)
    stop(worker)
    ran = Counter(job_id for job_id, *_ in jobs_chaos.executions() if job_id in set(ids))
    assert ran == dict.fromkeys(ids, 1), [i for i in ids if ran[i] != 1]
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}
    assert not JobAttempt.objects.filter(job_id__in=ids).exists()
