"""Pausing a queue (claims nothing, due times kept, resume wakes the workers) and the
operator's purge of its waiting jobs. Every Redis target, the cluster included."""

from __future__ import annotations

import threading

from django_delayq.engine import Engine, NewJob, scripts

NOW = 1_800_000_000_000
LEASE = 30_000


def test_a_paused_queue_claims_nothing_and_keeps_due_times(engine: Engine) -> None:
    k = engine.keys("q")
    engine.enqueue("q", [NewJob(id="a", at_ms=NOW - 5), NewJob(id="b", at_ms=NOW + 5)],
                   now_ms=NOW)
    assert engine.pause("q") is True
    assert engine.pause("q") is False  # already paused
    assert engine.paused(["q", "other"]) == ["q"]
    result = engine.claim("q", 10, LEASE, now_ms=NOW + 10)
    assert (result.jobs, result.paused, result.next_due_ms) == ([], True, None)
    assert engine.inspect("q", "a").score_ms == NOW - 5
    assert engine.client.zscore(k.pending, "b") == NOW + 5
    assert engine.resume("q") is True
    assert engine.resume("q") is False
    assert engine.paused(["q"]) == []
    result = engine.claim("q", 10, LEASE, now_ms=NOW + 10)
    assert not result.paused
    assert [(j.id, j.due_ms) for j in result.jobs] == [("a", NOW - 5), ("b", NOW + 5)]


def test_jobs_in_flight_settle_while_paused(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="a", at_ms=NOW)], now_ms=NOW)
    [a] = engine.claim("q", 1, LEASE, now_ms=NOW).jobs
    engine.pause("q")
    assert engine.ack("q", [(a.id, a.token)]) == [True]
    engine.enqueue("q", [NewJob(id="b", at_ms=NOW)], now_ms=NOW)
    assert engine.claim("q", 1, LEASE, now_ms=NOW).jobs == []


def test_resume_wakes_the_queues_listeners(engine: Engine) -> None:
    event = threading.Event()
    listener = engine.wake_listener(["q"], event)
    listener.start()
    try:
        assert event.wait(30)  # subscribed (it announces every queue then)
        listener.take()
        event.clear()
        engine.pause("q")
        before = engine.time_ms()
        assert engine.resume("q")
        assert event.wait(30)
        announced = listener.take()
        assert "q" in announced and before - 1000 <= announced["q"] <= engine.time_ms() + 1000
    finally:
        listener.stop()


def test_purge_pending_removes_waiting_jobs_only_and_forgets_them(engine: Engine) -> None:
    k = engine.keys("q")
    engine.enqueue("q", [NewJob(id="run", at_ms=NOW)], now_ms=NOW)
    [run] = engine.claim("q", 1, LEASE, now_ms=NOW).jobs
    jobs = [NewJob(id="j%03d" % i, at_ms=NOW + (i % 2) * 10**6, envelope="[\"x\",[]]",
                   priority=i % 3) for i in range(scripts.MAX_PURGE + 50)]
    engine.enqueue("q", jobs, now_ms=NOW)
    engine.client.hset(k.attempts, "j000", 2)
    engine.cancel("q", "run")  # marked while it runs: not purged
    first = engine.purge_pending("q", limit=10**6)
    assert len(first) == scripts.MAX_PURGE
    second = engine.purge_pending("q")
    assert sorted(first + second) == sorted(j.id for j in jobs)
    assert engine.purge_pending("q") == []
    for key in (k.pending, k.ready, k.prio, k.jobs):
        assert not engine.client.exists(key), key
    assert engine.client.hkeys(k.attempts) == [b"run"]
    assert engine.client.smembers(k.cancel) == {b"run"}
    assert engine.ack("q", [(run.id, run.token)]) == [True]
