"""regrant.lua: a stale rate grant renewed at the start (``Engine.regrant``), on the Redis
clock given as ``now_ms``: go, wait (its own entry given back), lost, no limit. Every Redis
target, the cluster included."""

from __future__ import annotations

import dataclasses

from django_delayq.engine import Engine, Grant, NewJob

NOW = 1_800_000_000_000
LEASE = 30_000


def _claimed(engine: Engine, n: int, rate: tuple[int, int] | None = (3, 1000)):  # type: ignore[no-untyped-def]
    engine.enqueue("q", [NewJob(id="j%d" % i, at_ms=NOW - 100) for i in range(n)], now_ms=NOW)
    engine.set_queue_limit("q", rate=rate, concurrency=None)
    jobs = engine.claim("q", n, LEASE, now_ms=NOW).jobs
    assert all(j.claimed_ms == NOW for j in jobs)
    return jobs


def _window(engine: Engine) -> dict[str, float]:
    return {m.decode(): s for m, s in engine.client.zrange(
        engine.keys("q").starts, 0, -1, withscores=True)}


def test_a_grant_with_room_moves_to_now(engine: Engine) -> None:
    [job] = _claimed(engine, 1)
    assert engine.regrant(job, now_ms=NOW + 1500) == Grant(granted=True)
    assert _window(engine) == {"j0:%d:%d" % (job.token, NOW + 1500): NOW + 1500}


def test_a_full_window_answers_when_it_has_room_and_keeps_no_grant_of_the_job(
        engine: Engine) -> None:
    a, b, c = _claimed(engine, 3)  # the window: three grants at NOW
    assert engine.regrant(a, now_ms=NOW + 10) == Grant(granted=True)  # its own left first
    engine.enqueue("q", [NewJob(id="x", at_ms=NOW)], now_ms=NOW + 20)
    assert engine.claim("q", 1, LEASE, now_ms=NOW + 20).jobs == []  # full
    engine.client.zadd(engine.keys("q").starts, {"other:1:%d" % (NOW + 30): NOW + 30})
    # four in the window now (a, b, c and another's): b asks at NOW + 40
    grant = engine.regrant(b, now_ms=NOW + 40)
    assert grant == Grant(granted=False, retry_at_ms=NOW + 1000)  # c's leaves then
    assert not any(m.startswith("j1:") for m in _window(engine))  # b's given back
    assert engine.defer("q", [(b.id, b.token, NOW + 1000)], now_ms=NOW + 41) == [True]


def test_a_lost_lease_writes_nothing(engine: Engine) -> None:
    [job] = _claimed(engine, 1)
    before = _window(engine)
    stale = dataclasses.replace(job, token=job.token + 1)
    assert engine.regrant(stale, now_ms=NOW + 100) is None
    engine.defer("q", [(job.id, job.token, NOW)], now_ms=NOW + 1)  # back in line: not held
    assert engine.regrant(job, now_ms=NOW + 100) is None
    assert _window(engine) == before


def test_a_queue_whose_rate_was_lifted_goes(engine: Engine) -> None:
    [job] = _claimed(engine, 1)
    engine.set_queue_limit("q", rate=None, concurrency=None)  # lifted at run time
    assert engine.regrant(job, now_ms=NOW + 100) == Grant(granted=True)
    assert _window(engine) == {}


def test_a_queue_without_a_rate_goes_and_logs_nothing(engine: Engine) -> None:
    [job] = _claimed(engine, 1, rate=None)
    assert engine.regrant(job, now_ms=NOW + 100) == Grant(granted=True)
    assert _window(engine) == {}


def test_a_lowered_rate_is_read_at_the_call(engine: Engine) -> None:
    a, b = _claimed(engine, 2)
    engine.set_queue_limit("q", rate=(1, 1000), concurrency=None)  # lowered at run time
    # a's own entry left; b's fills the window of one: room when it leaves
    assert engine.regrant(a, now_ms=NOW + 5) == Grant(granted=False, retry_at_ms=NOW + 1000)
    assert engine.regrant(b, now_ms=NOW + 6) == Grant(granted=True)  # its own left: room
