"""A periodic schedule through a short Redis outage: the tick a worker starts while Redis
is unreachable creates the next tick's row, whose send fails; once Redis is back, the
worker's keeper thread puts that job into Redis within seconds (core/tick_presence.py),
not after the reconciler's grace."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core import periodic
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus, Schedule
from django_delayq.worker.loop import Worker, WorkerOptions
from tests import jobs_chaos
from tests.helpers import point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BACK_WITHIN_S = 5.0  # max(2 intervals, 5 s) for an every-second schedule


def test_the_tick_after_one_started_during_an_outage_is_in_redis_soon_after_it(
        settings, fault_server, exec_table, caplog) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, fault_server)  # RECONCILE_GRACE_SECONDS: the default, 60 s
    assert get_settings().reconcile_grace_seconds >= 60
    jobs_chaos.reset_hung()
    engine = get_engine()
    blocker = schedule("tests.jobs_chaos.hang", 60)  # holds the worker's only thread
    worker = Worker(engine, get_settings(), WorkerOptions(queues=("default",), concurrency=1,
                                                            prefetch=4))  # claims behind it
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: blocker.status == JobStatus.RUNNING, timeout=30)
        s = Schedule.objects.create(name="every-second", callable_path="tests.jobs.noop",
                                    interval_seconds=1, start_at=timezone.now())
        first = periodic.keep(s)
        assert first is not None
        # the tick's job is claimed behind the blocker (the only thread is busy)
        wait_until(lambda: engine.inspect("default", first).place == "inflight", timeout=30)
        with caplog.at_level(logging.WARNING, logger="django_delayq"):
            fault_server.stop()
            jobs_chaos.release_hung()  # the thread is free: it starts the tick, Redis down
            wait_until(lambda: _next_of(s) != first, timeout=30)
            following = _next_of(s)
            wait_until(lambda: "stay in the outbox" in caplog.text, timeout=30)
        fault_server.start()  # AOF: the data is back, the send of `following` is not
        back = time.monotonic()
        wait_until(lambda: _in_redis(following), timeout=BACK_WITHIN_S)
        assert time.monotonic() - back <= BACK_WITHIN_S
        wait_until(lambda: _status(following) == JobStatus.SUCCEEDED, timeout=30)
        assert Job.objects.filter(pk=following).get().attempts == 1  # it ran once
    finally:
        jobs_chaos.release_hung()
        worker.request_stop()
        worker.request_stop()
        thread.join(30)


def _status(job_id: str) -> str | None:
    return Job.objects.filter(pk=job_id).values_list("status", flat=True).first()


def _next_of(s: Schedule) -> str:
    return Schedule.objects.filter(pk=s.pk).values_list("next_job_id", flat=True).get()


def _in_redis(job_id: str) -> bool:
    """Redis holds the job, or held it: a worker started it since."""
    if _status(job_id) != JobStatus.SCHEDULED:
        return True
    return get_engine().inspect("default", job_id).place != ""
