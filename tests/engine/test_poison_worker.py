"""Poison planted in Redis next to real jobs, seen by a real worker (in this process:
threads, the session's private redis-server, SQLite): the healthy jobs run once with
attempt 1, the poison entry is set aside and named in a WARNING, nothing stays in
flight, and the wake listener survives any message on its channel."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.helpers import burst, wait_until

if TYPE_CHECKING:
    from django_delayq.engine import Engine

pytestmark = pytest.mark.django_db(transaction=True)


def _jobs(n: int) -> list:  # type: ignore[type-arg]
    return [schedule("tests.jobs.noop", i) for i in range(n)]


def _all_ran_once(handles: list) -> bool:  # type: ignore[type-arg]
    rows = [h.job for h in handles]
    return all(r.status == JobStatus.SUCCEEDED and r.attempts == 1 for r in rows)


def _settled(engine: Engine) -> None:
    k = engine.keys("default")
    assert engine.client.zcard(k.inflight) == 0
    assert engine.client.zcard(k.pending) == 0


def test_a_non_utf8_id_does_not_strand_its_batch(delayq_settings,  # type: ignore[no-untyped-def]
                                                 caplog: pytest.LogCaptureFixture) -> None:
    engine = get_engine()
    k = engine.keys("default")
    handles = _jobs(5)
    engine.client.zadd(k.pending, {b"\xff\xfe\x00poison": 1})  # due first
    with caplog.at_level(logging.WARNING):
        assert burst() == 0
        assert burst() == 0  # and the next run (housekeeping included) is clean too
    assert _all_ran_once(handles)
    _settled(engine)
    assert r"b'\xff\xfe\x00poison'" in caplog.text and "removed from Redis" in caplog.text
    assert "Redis unavailable" not in caplog.text


def test_a_corrupt_attempts_value_costs_only_its_own_job(delayq_settings,  # type: ignore[no-untyped-def]
                                                         caplog: pytest.LogCaptureFixture) -> None:
    engine = get_engine()
    k = engine.keys("default")
    handles = _jobs(5)
    bad = handles.pop(2)
    engine.client.hset(k.attempts, bad.id, "not-a-number")
    with caplog.at_level(logging.WARNING):
        assert burst() == 0
        assert burst() == 0
    assert _all_ran_once(handles)
    _settled(engine)
    assert engine.inspect("default", bad.id).place == "dead"  # set aside, not lost
    assert "Redis unavailable" not in caplog.text and bad.id in caplog.text


def test_a_minus_inf_score_charges_no_attempt(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    k = engine.keys("default")
    handles = _jobs(5)
    bad = handles.pop(0)
    engine.client.zadd(k.pending, {bad.id: float("-inf")})
    assert burst() == 0
    assert _all_ran_once(handles)
    loc = engine.inspect("default", bad.id)
    assert (loc.place, loc.attempts) == ("dead", 0)
    _settled(engine)


@pytest.fixture
def idle_worker(delayq_settings) -> Iterator[Worker]:  # type: ignore[no-untyped-def]
    """A worker that polls only every 30 s: a job due sooner runs on time only if the wake
    listener hears its enqueue."""
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "WAKE_INTERVAL_SECONDS": 30}
    worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",)))
    later = schedule("tests.jobs.noop", delay=3600)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_until(lambda: _subscribers(worker) == 1, timeout=10)
        yield worker
    finally:
        worker.request_stop()
        thread.join(15)
    assert not thread.is_alive()
    assert later.job.status == JobStatus.SCHEDULED


def _subscribers(worker: Worker) -> int:
    channel = worker.engine.keys("default").channel
    return int(dict(worker.engine.client.pubsub_numsub(channel))[channel.encode()])


GARBAGE = [b"inf", b"-inf", b"nan", b"1e400", b"9" * 5000, b"\xff\xfe", b"abc", b"",
           b"12 34", b"0x10", b"253402300800000", b"-62135596800001"]


def _runs_promptly(worker: Worker) -> None:
    soon = schedule("tests.jobs.noop", delay=0.2)
    wait_until(lambda: soon.job.status == JobStatus.SUCCEEDED, timeout=10)


def test_wake_listener_survives_any_message(idle_worker: Worker) -> None:
    client = idle_worker.engine.client
    channel = idle_worker.engine.keys("default").channel
    for message in GARBAGE:
        assert client.publish(channel, message) == 1
    wait_until(lambda: client.ping() and idle_worker.claiming.listener._thread.is_alive(), timeout=2)
    _runs_promptly(idle_worker)  # heard the real enqueue after all that
    assert idle_worker.claiming.listener._thread.is_alive()


def test_wake_listener_reconnects_after_its_connection_drops(idle_worker: Worker) -> None:
    client = idle_worker.engine.client
    assert client.client_kill_filter(_type="pubsub") >= 1
    wait_until(lambda: _subscribers(idle_worker) == 1, timeout=10)
    _runs_promptly(idle_worker)
    assert idle_worker.claiming.listener._thread.is_alive()
