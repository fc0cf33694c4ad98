"""A periodic schedule keeps ticking when Redis loses data under a running worker.

* The schedule points at its next tick's job before that job reaches Redis: a worker that
  starts the job at once finds it named as the next tick and creates the tick after it.
* A pending tick job Redis lost (a failover to a replica that missed the last writes:
  the queue's epoch survives, so no loss pass) is back in Redis within max(2 intervals,
  5 s) through the worker's keeper, not after its 10-second pass or the reconciler's
  grace; so is one whose row was written long before (the reconciler's loss pass would
  reach it only after the queue's backlog).
* A keeper pass run while the workers registry is empty (wiped with the rest of Redis,
  the live workers not back in it yet) does not cancel a late tick as missed: the worker
  running that pass was serving the queue when the tick was due.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core import periodic, tick_presence
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus, Schedule
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.helpers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

BACK_WITHIN_S = 5.0  # max(2 intervals, 5 s) for an every-second schedule


@pytest.fixture
def start_worker(delayq_settings) -> Iterator[Callable[[], Worker]]:  # type: ignore[no-untyped-def]
    """Starts a real worker on a thread of this process: one job thread, nothing claimed
    beyond it (a tick waits in Redis while the thread is busy)."""
    started: list[tuple[Worker, threading.Thread]] = []

    def start() -> Worker:
        w = Worker(get_engine(), get_settings(), WorkerOptions(
            queues=("default",), concurrency=1, prefetch=0))
        thread = threading.Thread(target=w.run, daemon=True)
        thread.start()
        started.append((w, thread))
        return w

    yield start
    for w, thread in started:
        w.request_stop()
        w.request_stop()
        thread.join(30)


@pytest.fixture
def worker(start_worker) -> Worker:  # type: ignore[no-untyped-def]
    return start_worker()  # type: ignore[no-any-return]


def every_second(out: Path) -> Schedule:
    return Schedule.objects.create(name="every-second", callable_path="tests.jobs.record",
                                   args=[str(out), "tick"], interval_seconds=1)


def next_job(s: Schedule) -> str:
    return Schedule.objects.filter(pk=s.pk).values_list("next_job_id", flat=True).get()


def status(job_id: str) -> str | None:
    return Job.objects.filter(pk=job_id).values_list("status", flat=True).first()


def in_redis(job_id: str) -> bool:
    """Redis holds the job, or held it: a worker started it since."""
    return status(job_id) != JobStatus.SCHEDULED or \
        get_engine().inspect("default", job_id).place != ""


def test_the_schedule_names_its_next_tick_before_the_job_reaches_redis(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    s = Schedule.objects.create(name="hourly", callable_path="tests.jobs.noop",
                                interval_seconds=3600)
    seen: list[int] = []

    def look(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip().upper().startswith("UPDATE") and "schedule" in sql:
            seen.append(len(engine.client.zrange(engine.keys("default").pending, 0, -1)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(look):
        job_id = periodic.keep(s)
    assert job_id is not None and next_job(s) == job_id
    assert seen == [0]  # pointed at it while Redis did not hold it yet
    assert engine.inspect("default", job_id).place == "pending"  # sent at the commit


def test_a_pending_tick_job_is_put_back_however_old_its_row(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """A tick job created an hour before Redis lost it (an hourly schedule), or whose send
    failed at the start of a long outage: the keeper pass puts it back, rather than
    leaving it to the reconciler's loss pass behind the queue's backlog."""
    s = Schedule.objects.create(name="hourly", callable_path="tests.jobs.noop",
                                interval_seconds=3600)
    job_id = periodic.keep(s)
    assert job_id is not None
    assert get_engine().purge_pending("default") == [job_id]  # lost with Redis's data
    Job.objects.filter(pk=job_id).update(updated_at=timezone.now() - timedelta(hours=1))
    s.refresh_from_db()
    assert periodic.keep_all() == 0
    assert get_engine().inspect("default", job_id).place == "pending"
    assert status(job_id) == JobStatus.SCHEDULED and next_job(s) == job_id


def test_a_tick_job_redis_lost_is_back_within_the_bound(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    s = every_second(out)
    periodic.keep(s)  # its first tick
    # The schedule exists before the worker starts: its first full pass, whenever it
    # runs, finds a schedule enabled (a pass that found none would leave the worker
    # creating no next tick at a start until its next full pass). That pass runs once:
    # what follows is the pass over stalled schedules (the full pass every 10 s would be
    # too late for the bound).
    worker = start_worker()
    worker.housekeeping.schedules.every_s = 3600.0
    wait_until(lambda: out.exists() and len(out.read_text().splitlines()) >= 2, timeout=60)
    wait_until(lambda: get_engine().inspect("default", next_job(s)).place == "pending",
               timeout=30)
    lost = next_job(s)
    # the keeper saw it in Redis (a tick job whose send may have failed is watched until)
    wait_until(lambda: lost not in tick_presence.watched(), timeout=30)
    assert get_engine().purge_pending("default") == [lost]  # the last write, lost
    lost_at = timezone.now()
    wait_until(lambda: in_redis(lost), timeout=BACK_WITHIN_S)
    assert timezone.now() - lost_at <= timedelta(seconds=BACK_WITHIN_S)
    wait_until(lambda: status(lost) == JobStatus.SUCCEEDED, timeout=30)
    after = next_job(s)  # the ticks go on
    wait_until(lambda: status(next_job(s)) == JobStatus.SUCCEEDED or next_job(s) != after,
               timeout=30)


def test_a_keeper_pass_with_the_registry_wiped_keeps_a_late_tick(worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    gate = tmp_path / "gate"
    blocker = schedule("tests.jobs.report_then_wait", 1, str(gate))  # the only thread
    wait_until(lambda: status(blocker.id) == JobStatus.RUNNING, timeout=30)
    keeper = worker.housekeeping.schedules
    keeper.every_s = 0.0  # each keeper tick is a full pass (as every 10 s)
    s = every_second(tmp_path / "runs.txt")
    periodic.keep(s)
    late = next_job(s)
    due = Job.objects.get(pk=late).run_at
    wait_until(lambda: timezone.now() > due + periodic.MISSED_GRACE + timedelta(seconds=1),
               timeout=30)
    wait_until(lambda: worker.id in {w.id for w in engine.workers()}, timeout=30)
    keeper.tick()
    assert status(late) == JobStatus.SCHEDULED  # behind a busy worker: not missed
    for key in list(engine.client.scan_iter(match="{%s*" % get_settings().prefix)):
        engine.client.delete(key)  # Redis lost everything, the registry with it
    keeper.tick()  # a pass before the worker's next heartbeat: an empty registry
    assert status(late) == JobStatus.SCHEDULED  # not cancelled as missed
    assert next_job(s) == late
    wait_until(lambda: in_redis(late), timeout=BACK_WITHIN_S)
    gate.touch()
    wait_until(lambda: status(late) == JobStatus.SUCCEEDED, timeout=30)
