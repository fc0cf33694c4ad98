"""Engine tests: a real redis-server (every binary we have) and a real local Redis Cluster
(``redis_target`` in tests/conftest.py), no Django."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_delayq.engine import CancelOutcome, Engine, NackOutcome, NewJob
from django_delayq.engine.engine import MoveOutcome
from django_delayq.engine.envelope import Envelope

NOW = 1_800_000_000_000
ENV = Envelope(path="tests.jobs.noop", args=[1]).encode()


def job(id_: str, at: int = NOW, envelope: str = ENV) -> NewJob:
    return NewJob(id=id_, envelope=envelope, at_ms=at)


def places(engine: Engine, queue: str, id_: str) -> list[str]:
    k = engine.keys(queue)
    c = engine.client
    return [name for name, key in (("pending", k.pending), ("ready", k.ready),
                                    ("inflight", k.inflight), ("dead", k.dead))
             if c.zscore(key, id_) is not None]


def due_of(engine: Engine, queue: str, id_: str) -> int | None:
    """The due time of a waiting job (in pending, or in ready: decoded from its score)."""
    loc = engine.inspect(queue, id_)
    return loc.score_ms if loc.place == "pending" else None


def test_enqueue_is_idempotent_by_id(engine: Engine) -> None:
    assert engine.enqueue("q", [job("a"), job("b")], now_ms=NOW) == 2
    assert engine.enqueue("q", [job("a", at=NOW + 5)], now_ms=NOW) == 0
    assert due_of(engine, "q", "a") == NOW


def test_delay_is_relative_to_server_now(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="a", envelope=ENV, delay_ms=1500)], now_ms=NOW)
    assert engine.client.zscore(engine.keys("q").pending, "a") == NOW + 1500
    server_now = engine.time_ms()
    engine.enqueue("q", [NewJob(id="b", envelope=ENV, delay_ms=0)])
    assert abs((due_of(engine, "q", "b") or 0) - server_now) < 1000


def test_claim_takes_only_due_jobs_in_due_order(engine: Engine) -> None:
    engine.enqueue("q", [job("late", NOW + 10), job("b", NOW - 5), job("a", NOW - 9)], now_ms=NOW)
    result = engine.claim("q", 10, 30_000, now_ms=NOW)
    assert [j.id for j in result.jobs] == ["a", "b"]
    assert [j.due_ms for j in result.jobs] == [NOW - 9, NOW - 5]
    assert [j.token for j in result.jobs] == [1, 1]
    assert result.next_due_ms == NOW + 10
    assert result.now_ms == NOW
    assert engine.client.zscore(engine.keys("q").inflight, "a") == NOW + 30_000


def test_claim_respects_limit(engine: Engine) -> None:
    engine.enqueue("q", [job(str(i)) for i in range(10)], now_ms=NOW)
    assert len(engine.claim("q", 3, 1000, now_ms=NOW).jobs) == 3
    assert engine.stats("q", now_ms=NOW).ready == 7


def test_invariant_1_job_in_exactly_one_place_through_its_life(engine: Engine) -> None:
    engine.enqueue("q", [job("a")], now_ms=NOW)
    assert places(engine, "q", "a") == ["ready"]  # due already: no promotion needed
    claimed = engine.claim("q", 1, 1000, now_ms=NOW).jobs[0]
    assert places(engine, "q", "a") == ["inflight"]
    assert engine.nack("q", [("a", claimed.token, 100)], now_ms=NOW) == [NackOutcome.RETRYING]
    assert places(engine, "q", "a") == ["pending"]  # due later
    claimed = engine.claim("q", 1, 1000, now_ms=NOW + 100).jobs[0]
    assert claimed.token == 2
    assert engine.nack("q", [("a", 2, None)], now_ms=NOW) == [NackOutcome.DEAD]
    assert places(engine, "q", "a") == ["dead"]
    assert engine.client.hexists(engine.keys("q").jobs, "a")
    assert engine.requeue("q", "a", now_ms=NOW)[0] is MoveOutcome.MOVED
    assert places(engine, "q", "a") == ["ready"]
    claimed = engine.claim("q", 1, 1000, now_ms=NOW).jobs[0]
    # requeue gives fresh attempts, not tokens: the clock's, above any delivery's
    assert (claimed.attempt, claimed.token) == (1, NOW + 1)
    assert engine.ack("q", [("a", 2)]) == [False]  # the dead delivery's: refused
    assert engine.ack("q", [("a", claimed.token)]) == [True]
    assert places(engine, "q", "a") == []
    k = engine.keys("q")
    assert not engine.client.hexists(k.jobs, "a") and not engine.client.hexists(k.attempts, "a")
    assert not engine.client.hexists(k.runs, "a")


def test_invariant_2_every_transition_is_one_script_call(engine: Engine) -> None:
    """A crash between two client calls loses nothing: after each single call the job is
    fully in one consistent state (checked by inspect after each call)."""
    engine.enqueue("q", [job("a")], now_ms=NOW)
    assert engine.inspect("q", "a").place == "pending"
    c = engine.claim("q", 1, 50, now_ms=NOW).jobs[0]
    engine.mark_started([c])  # its run started (a lost lease of it is an attempt)
    loc = engine.inspect("q", "a")
    assert (loc.place, loc.attempts, loc.envelope) == ("inflight", 1, ENV)
    # the client "crashes" here: no ack ever comes. Recovery alone brings it back.
    recovered = engine.recover("q", now_ms=NOW + 51)
    assert [(r.id, r.outcome, r.attempts) for r in recovered] == [("a", NackOutcome.RETRYING, 1)]
    assert engine.inspect("q", "a").place == "pending"
    assert engine.ack("q", [("a", c.token)]) == [False]  # the late ack is refused


def test_invariant_3_scripts_touch_only_their_batch(engine: Engine) -> None:
    """Claim, recover and enqueue work on their batch only: with a large backlog of
    future jobs a claim returns at most `limit` and leaves the backlog untouched."""
    k = engine.keys("q")
    backlog = {("f%d" % i): NOW + 60_000 + i for i in range(20_000)}
    engine.client.zadd(k.pending, backlog)
    engine.client.hset(k.jobs, mapping=dict.fromkeys(list(backlog)[:10], ENV))
    engine.enqueue("q", [job("due%d" % i) for i in range(5)], now_ms=NOW)
    result = engine.claim("q", 3, 1000, now_ms=NOW)
    assert len(result.jobs) == 3
    assert engine.client.zcard(k.pending) == 20_000
    assert engine.client.zcard(k.ready) == 2
    assert engine.recover("q", limit=2, now_ms=NOW + 2000) != []
    assert engine.client.zcard(k.inflight) == 1  # 3 expired, 2 recovered in this call
    stats = engine.stats("q", now_ms=NOW + 2000)
    assert (stats.ready, stats.scheduled) == (4, 20_000)
    assert stats.next_due_ms == NOW + 60_000


def test_invariant_4_lost_worker_job_is_delivered_again(engine: Engine) -> None:
    engine.enqueue("q", [job("a")], now_ms=NOW)
    first = engine.claim("q", 1, 1000, now_ms=NOW).jobs[0]
    assert engine.claim("q", 1, 1000, now_ms=NOW + 500).jobs == []
    assert engine.recover("q", now_ms=NOW + 999) == []  # lease still valid
    engine.recover("q", now_ms=NOW + 1000)
    second = engine.claim("q", 1, 1000, now_ms=NOW + 1001).jobs[0]
    assert (second.id, second.token) == ("a", first.token + 1)
    assert engine.ack("q", [("a", first.token)]) == [False]
    assert engine.ack("q", [("a", second.token)]) == [True]


def test_invariant_4_expired_lease_without_attempts_left_goes_dead(engine: Engine) -> None:
    env = Envelope(path="tests.jobs.noop", max_attempts=1).encode()
    engine.enqueue("q", [job("a", envelope=env)], now_ms=NOW)
    engine.mark_started(engine.claim("q", 1, 10, now_ms=NOW).jobs)
    [r] = engine.recover("q", default_max_attempts=5, now_ms=NOW + 10)
    assert r.outcome is NackOutcome.DEAD
    assert places(engine, "q", "a") == ["dead"]


def test_invariant_5_cancelled_before_start_never_runs(engine: Engine) -> None:
    engine.enqueue("q", [job("a"), job("b")], now_ms=NOW)
    assert engine.cancel("q", "a") is CancelOutcome.CANCELLED
    assert [j.id for j in engine.claim("q", 10, 1000, now_ms=NOW + 10**9).jobs] == ["b"]
    assert engine.cancel("q", "a") is CancelOutcome.NOT_FOUND
    assert engine.enqueue("q", [], now_ms=NOW) == 0


def test_cancel_running_job_is_not_retried(engine: Engine) -> None:
    engine.enqueue("q", [job("a"), job("b")], now_ms=NOW)
    a, b = engine.claim("q", 2, 1000, now_ms=NOW).jobs
    assert engine.cancel("q", "a") is CancelOutcome.ALREADY_RUNNING
    assert engine.cancel("q", "b") is CancelOutcome.ALREADY_RUNNING
    assert engine.nack("q", [("a", a.token, 0)], now_ms=NOW) == [NackOutcome.CANCELLED]
    [r] = engine.recover("q", now_ms=NOW + 1000)
    assert (r.id, r.outcome) == ("b", NackOutcome.CANCELLED)
    assert engine.inspect("q", "a").place == engine.inspect("q", "b").place == ""


def test_cancel_then_success_still_acks(engine: Engine) -> None:
    engine.enqueue("q", [job("a")], now_ms=NOW)
    a = engine.claim("q", 1, 1000, now_ms=NOW).jobs[0]
    engine.cancel("q", "a")
    assert engine.ack("q", [("a", a.token)]) == [True]
    assert not engine.client.sismember(engine.keys("q").cancel, "a")


def test_extend_keeps_lease_and_refuses_stale_token(engine: Engine) -> None:
    engine.enqueue("q", [job("a")], now_ms=NOW)
    a = engine.claim("q", 1, 1000, now_ms=NOW).jobs[0]
    assert engine.extend("q", [("a", a.token)], 1000, now_ms=NOW + 900) == [True]
    assert engine.recover("q", now_ms=NOW + 1500) == []
    assert engine.extend("q", [("a", a.token + 1)], 1000, now_ms=NOW) == [False]


def test_release_undoes_claim(engine: Engine) -> None:
    engine.enqueue("q", [job("a", NOW - 7)], now_ms=NOW)
    a = engine.claim("q", 1, 1000, now_ms=NOW).jobs[0]
    assert engine.release("q", [a]) == [True]
    loc = engine.inspect("q", "a")
    assert (loc.place, loc.score_ms, loc.attempts) == ("pending", NOW - 7, 0)
    assert engine.release("q", [a]) == [False]


def test_reschedule_and_run_now(engine: Engine) -> None:
    engine.enqueue("q", [job("a", NOW + 60_000)], now_ms=NOW)
    outcome, due = engine.reschedule("q", "a", delay_ms=0, now_ms=NOW)
    assert (outcome, due) == (MoveOutcome.MOVED, NOW)
    assert engine.reschedule("q", "a", at_ms=NOW + 5, now_ms=NOW) == (MoveOutcome.MOVED, NOW + 5)
    engine.claim("q", 1, 1000, now_ms=NOW + 5)
    assert engine.reschedule("q", "a", now_ms=NOW)[0] is MoveOutcome.ALREADY_RUNNING
    assert engine.reschedule("q", "zz", now_ms=NOW)[0] is MoveOutcome.NOT_FOUND


def test_dead_set_is_capped(engine: Engine) -> None:
    engine.enqueue("q", [job(str(i)) for i in range(5)], now_ms=NOW)
    claimed = engine.claim("q", 5, 1000, now_ms=NOW).jobs
    engine.nack("q", [(j.id, j.token, None) for j in claimed], dead_max=3, now_ms=NOW)
    assert engine.client.zcard(engine.keys("q").dead) == 3
    assert engine.client.hlen(engine.keys("q").jobs) == 3


def test_wake_channel_hears_new_earliest_only(engine: Engine) -> None:
    pubsub = engine.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(engine.keys("q").channel)
    pubsub.get_message(timeout=1)
    engine.enqueue("q", [job("a", NOW + 100)], now_ms=NOW)
    engine.enqueue("q", [job("b", NOW + 200)], now_ms=NOW)  # not earlier: silent
    engine.enqueue("q", [job("c", NOW + 50)], now_ms=NOW)
    got = []
    while (m := pubsub.get_message(timeout=0.5)) is not None:
        got.append(int(m["data"]))
    assert got == [NOW + 100, NOW + 50]
    pubsub.close()


def test_noscript_reload(engine: Engine) -> None:
    engine.client.script_flush()
    assert engine.enqueue("q", [job("a")], now_ms=NOW) == 1


def test_keys_share_one_hash_tag(engine: Engine) -> None:
    from redis.crc import key_slot

    keys = engine.keys("orders").all() + (engine.keys("orders").channel,)
    assert len({key_slot(k.encode()) for k in keys}) == 1


def test_string_responses_client_works(redis_target: Callable[..., Any]) -> None:
    client = redis_target(decode_responses=True)
    e = Engine(client, prefix="strs")
    e.enqueue("q", [job("a")], now_ms=NOW)
    assert e.claim("q", 1, 1000, now_ms=NOW).jobs[0].envelope == ENV
    e.purge("q")


def test_a_clock_given_to_the_engine_is_now_for_every_script(engine: Engine) -> None:
    now = [NOW]
    clocked = Engine.like(engine, clock=lambda: now[0])
    clocked.enqueue("q", [NewJob(id="a", envelope=ENV, delay_ms=1000)])
    assert clocked.claim("q", 10, 1000).jobs == []  # due at NOW + 1000, not yet
    assert clocked.stats("q").now_ms == NOW == clocked.time_ms()
    now[0] += 1000
    [claimed] = clocked.claim("q", 10, 1000).jobs
    assert (claimed.id, claimed.due_ms) == ("a", NOW + 1000)
    assert clocked.claim("q", 10, 1000, now_ms=NOW).now_ms == NOW  # an explicit now wins
