"""The event stream: every transition lands in a capped Redis Stream, written in batches
by a background thread, never on the job's hot path."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis

from django_delayq import schedule
from django_delayq.core import conf, events
from django_delayq.engine.event_log import EventLog
from django_delayq.testing import run_due_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def _stream_events(engine) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    events.flush()
    raw = engine.client.xrange(events.stream_key(engine.prefix))
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in raw]


def _of(job_id: str, found: list[dict[str, str]]) -> list[str]:
    return [e["event"] for e in found if e["job"] == job_id]


def _wait_for(predicate, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_a_fast_job_folds_started_into_succeeded(delayq_engine):
    """A job that starts and ends within one flush is one entry carrying both."""
    stream = events.get_stream()
    assert stream is not None
    stream.flush_seconds = 600  # no timed flush between start and end: only ours below
    job_id = schedule("tests.jobs.add", 1, 2).id
    run_due_jobs()
    found = _stream_events(delayq_engine)
    assert _of(job_id, found) == ["scheduled", "succeeded"]
    succeeded = [e for e in found if e["job"] == job_id][1]
    assert succeeded["queue"] == "default" and succeeded["callable"] == "tests.jobs.add"
    assert succeeded["attempt"] == "1" and succeeded["worker"]
    assert float(succeeded["duration_ms"]) >= 0 and float(succeeded["lateness_ms"]) > -1000


def test_a_job_still_running_at_flush_has_its_own_started_event(delayq_settings):
    from django_delayq.core.events import _materialise

    started = ("started", 1.0, {"job_id": "j", "attempt": 1, "queue": "q",
                                "callable_path": "m.f", "worker_id": "w"})
    done = ("succeeded", 2.0, {"job_id": "j", "attempt": 1, "queue": "q",
                               "callable_path": "m.f", "worker_id": "w", "duration": 1.0})
    assert [e["event"] for e in _materialise([started])] == ["started"]
    assert [e["event"] for e in _materialise([done])] == ["succeeded"]
    [folded] = _materialise([started, done])
    assert folded["event"] == "succeeded" and folded["ts_ms"] == "2000"


def test_retries_and_death_are_recorded_with_the_error(delayq_engine):
    job_id = schedule("tests.jobs.boom", "kaput", max_attempts=2, backoff=[0]).id
    run_due_jobs()
    run_due_jobs()
    found = [e for e in _stream_events(delayq_engine) if e["job"] == job_id]
    events_ = [e["event"] for e in found if e["event"] != "started"]  # folded when fast
    assert events_ == ["scheduled", "retrying", "dead"]
    retrying, dead = [e for e in found if e["event"] in ("retrying", "dead")]
    assert "kaput" in retrying["error"] and retrying["retry_at"]
    assert dead["attempt"] == "2" and "kaput" in dead["error"]


def test_cancel_is_recorded(delayq_engine):
    job_id = schedule("tests.jobs.noop", delay=3600).id
    schedule("tests.jobs.noop", delay=3600)  # another job: not in this job's events
    from django_delayq.core import api

    api.cancel(job_id)
    found = [e for e in _stream_events(delayq_engine) if e["job"] == job_id]
    assert [e["event"] for e in found] == ["scheduled", "cancelled"]
    assert found[1]["running"] == "0"


def test_scheduled_is_written_only_when_the_transaction_commits(delayq_engine):
    from django.db import transaction

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        rolled_back = schedule("tests.jobs.noop", delay=60).id
        raise Rollback
    with transaction.atomic():
        kept = schedule("tests.jobs.noop", delay=60).id
        assert events.get_stream() is None or events.get_stream().pending() == 0
    found = _stream_events(delayq_engine)
    assert _of(rolled_back, found) == [] and _of(kept, found) == ["scheduled"]


def test_events_are_buffered_then_flushed_in_one_pipeline(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    stream = events.EventStream(client, "{tbuf}:events", maxlen=1000, flush_seconds=30)
    try:
        for i in range(100):
            stream.add({"event": "started", "job": str(i)})
        assert client.xlen("{tbuf}:events") == 0  # adding never touches Redis
        assert stream.pending() == 100
        assert stream.flush() == 100
        assert client.xlen("{tbuf}:events") == 100 and stream.pending() == 0
        jobs = [f[b"job"] for _, f in client.xrange("{tbuf}:events")]
        assert jobs == [str(i).encode() for i in range(100)]  # in order
    finally:
        stream.close()
        client.delete("{tbuf}:events")


def test_the_background_thread_flushes_without_being_asked(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    stream = events.EventStream(client, "{tbg}:events", maxlen=1000)
    try:
        for i in range(10):
            stream.add({"event": "started", "job": str(i)})
        assert _wait_for(lambda: client.xlen("{tbg}:events") == 10)
    finally:
        stream.close()
        client.delete("{tbg}:events")


class _HeldLog(events.EventLog):
    """The real log, whose first write waits until the test lets it go."""

    def __init__(self, client, key):  # type: ignore[no-untyped-def]
        super().__init__(client, key, 1000)
        self.writing = threading.Event()
        self.go_on = threading.Event()

    def append(self, batch):  # type: ignore[no-untyped-def]
        if not self.writing.is_set():
            self.writing.set()
            assert self.go_on.wait(30)
        yield from super().append(batch)


def test_a_flush_waits_for_the_batch_another_thread_is_writing(redis_server):
    """flush() returns once everything added before it is in the stream, even when the
    background thread took those events a moment earlier and is still writing them."""
    client = redis.Redis.from_url(redis_server.url)
    log = _HeldLog(client, "{thold}:events")
    stream = events.EventStream(log, flush_seconds=0)
    try:
        stream.add({"event": "started", "job": "1"})
        assert log.writing.wait(30)  # the thread holds the batch, not yet written
        done = threading.Event()
        waiter = threading.Thread(target=lambda: (stream.flush(), done.set()))
        waiter.start()
        assert not done.wait(0.2)  # still waiting for the thread's batch
        log.go_on.set()
        assert done.wait(30)
        assert client.xlen("{thold}:events") == 1  # written by the time flush() returned
        waiter.join(30)
    finally:
        log.go_on.set()
        stream.close()
        client.delete("{thold}:events")


def test_the_stream_is_capped(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    stream = events.EventStream(client, "{tcap}:events", maxlen=50, flush_seconds=30)
    try:
        for round_ in range(20):
            for i in range(100):
                stream.add({"event": "started", "job": "%d-%d" % (round_, i)})
            stream.flush()
        length = client.xlen("{tcap}:events")
        # MAXLEN ~ trims whole stream nodes (100 entries each by default): about 50 kept.
        assert 50 <= length <= 250, length
        last = client.xrevrange("{tcap}:events", count=1)[0][1][b"job"]
        assert last == b"19-99"
    finally:
        stream.close()
        client.delete("{tcap}:events")


def test_redis_down_keeps_a_bounded_buffer_and_never_raises(redis_server):
    client = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    stream = events.EventStream(client, "{tdown}:events", maxlen=100, flush_seconds=30,
                                buffer_max=10)
    for i in range(25):
        stream.add({"event": "started", "job": str(i)})
    assert stream.dropped == 15 and stream.pending() == 10
    assert stream.flush() == 0  # logged, kept for the next try
    assert stream.pending() == 10
    good = redis.Redis.from_url(redis_server.url)
    stream.log.client = good  # Redis is back
    try:
        assert stream.flush() == 10
        assert [f[b"job"] for _, f in good.xrange("{tdown}:events")] == [
            str(i).encode() for i in range(15, 25)]  # the newest ones survived
    finally:
        stream.close()
        good.delete("{tdown}:events")


@pytest.mark.skipif("EVENTS" not in conf.DEFAULTS,
                    reason="needs the EVENTS / EVENTS_MAXLEN keys in conf.py")
def test_events_can_be_turned_off(delayq_settings, delayq_engine):
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "EVENTS": False}
    schedule("tests.jobs.add", 1, 2)
    run_due_jobs()
    assert events.get_stream() is None
    assert _stream_events(delayq_engine) == []


def test_a_scheduled_event_keeps_its_fields(delayq_engine):
    """Every field of a ``scheduled`` entry, its due time as the row's."""
    from django_delayq.models import Job

    before_ms = int(time.time() * 1000)
    job_id = schedule("tests.jobs.noop", delay=3600).id
    [found] = [e for e in _stream_events(delayq_engine) if e["job"] == job_id]
    row = Job.objects.get(id=job_id)
    assert set(found) == {"event", "job", "queue", "callable", "ts_ms", "run_at"}
    assert found["event"] == "scheduled" and found["queue"] == "default"
    assert found["callable"] == "tests.jobs.noop"
    assert found["run_at"] == row.run_at.isoformat()
    assert before_ms <= int(found["ts_ms"]) <= int(time.time() * 1000)


def test_a_scheduled_event_is_formatted_as_every_event(delayq_settings, monkeypatch):
    """``job_scheduled``'s receiver buffers the fields ``_fields`` makes of its arguments,
    in the same order (its own formatting, without the general case)."""
    from datetime import UTC, datetime, timedelta, timezone

    from django_delayq.models import Job

    buffered: list[object] = []
    monkeypatch.setattr(events, "_add", buffered.append)
    monkeypatch.setattr(events.time, "time", lambda: 1_800_000_000.1234)
    moments = [datetime(2031, 1, 2, 3, 4, 5, 678, tzinfo=UTC), None,
               datetime(2031, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))]
    for run_at in moments:
        for sent in ({"job_id": "01j", "queue": "q", "callable_path": "m.f", "run_at": run_at},
                     {"job_id": "01j", "queue": "q", "callable_path": None, "run_at": run_at}):
            events._on_scheduled(sender=Job, **sent)
            got, expected = buffered.pop(), events._fields("scheduled", sent)
            assert got == expected and list(got) == list(expected)


def test_adding_an_event_does_not_wake_a_ticking_flusher(redis_server):
    """The flusher writes on its own clock: an event is appended, nobody is woken."""
    client = redis.Redis.from_url(redis_server.url)
    stream = events.EventStream(client, "{tnowake}:events", maxlen=10_000,
                                flush_seconds=600, idle_seconds=600)
    try:
        for i in range(events.WAKE_AT - 1):
            stream.add({"event": "started", "job": str(i)})
            assert not stream._wake.is_set()
        assert client.xlen("{tnowake}:events") == 0
    finally:
        stream.close()
    assert client.xlen("{tnowake}:events") == events.WAKE_AT - 1  # close() wrote them
    client.delete("{tnowake}:events")


def test_a_burst_wakes_the_flusher_at_once(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    stream = events.EventStream(client, "{tburst}:events", maxlen=10_000,
                                flush_seconds=600, idle_seconds=600)  # no tick in this test
    try:
        for i in range(events.WAKE_AT):
            stream.add({"event": "started", "job": str(i)})
        assert _wait_for(lambda: client.xlen("{tburst}:events") == events.WAKE_AT)
    finally:
        stream.close()
        client.delete("{tburst}:events")


def test_an_idle_flusher_sleeps_and_the_next_event_wakes_it(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    stream = events.EventStream(client, "{tpark}:events", maxlen=1000,
                                flush_seconds=0.005, idle_seconds=0.005)
    try:
        stream.add({"event": "started", "job": "1"})
        assert _wait_for(lambda: client.xlen("{tpark}:events") == 1)
        assert _wait_for(lambda: stream._parked)  # PARK_TICKS empty ticks: asleep
        stream.add({"event": "started", "job": "2"})
        assert _wait_for(lambda: client.xlen("{tpark}:events") == 2)
        assert [f[b"job"] for _, f in client.xrange("{tpark}:events")] == [b"1", b"2"]
    finally:
        stream.close()
        client.delete("{tpark}:events")


def test_close_stops_a_sleeping_flusher_at_once(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    stream = events.EventStream(client, "{tclose}:events", maxlen=1000,
                                flush_seconds=0.005, idle_seconds=0.005)
    stream.add({"event": "started", "job": "1"})
    thread = stream._thread
    assert thread is not None
    assert _wait_for(lambda: stream._parked)
    stream.idle_seconds = 600  # a tick after waking would be a long one
    stream.close()
    assert not thread.is_alive()  # close() joined it: its wait ended, not timed out
    client.delete("{tclose}:events")


@pytest.mark.django_db
def test_no_cluster_node_answers_the_scheduled_event_waits_without_an_error(
        delayq_settings, redis_server, caplog, django_capture_on_commit_callbacks):
    # A cluster client connects when it is made: the stream is made without one, so
    # schedule() neither logs an error per call nor loses its event.
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "REDIS_URL": "redis+cluster://127.0.0.1:1/"}
    with caplog.at_level(logging.WARNING):
        with django_capture_on_commit_callbacks(execute=True):
            schedule("tests.jobs.add", 1, 2)
            schedule("tests.jobs.add", 3, 4)
        stream = events.get_stream()
        assert stream is not None and stream.pending() == 2
        assert stream.flush() == 0 and stream.pending() == 2  # no node yet: kept
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]
    good = redis.Redis.from_url(redis_server.url)
    key = "{tnocluster}:events"
    stream._connect = lambda: EventLog(good, key, 100)  # a node answers again
    try:
        assert stream.flush() == 2
        assert [f[b"event"] for _, f in good.xrange(key)] == [b"scheduled"] * 2
    finally:
        events.reset()
        good.delete(key)
