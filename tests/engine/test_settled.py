"""Settled records, the ack stream and recovery's contact condition, on a real Redis
(every binary we have, and the cluster where a test says so)."""

from __future__ import annotations

import time

from django_delayq.engine import Contact, Engine, NackOutcome, NewJob
from django_delayq.engine.outbox import Settled

NOW = 1_800_000_000_000


def claimed(engine: Engine, *ids: str, queue: str = "q", lease_ms: int = 1000
            ) -> dict[str, int]:
    engine.enqueue(queue, [NewJob(id=i, at_ms=NOW) for i in ids], now_ms=NOW)
    return {j.id: j.token for j in engine.claim(queue, len(ids), lease_ms, now_ms=NOW).jobs}


def test_an_ack_with_a_holder_leaves_a_record_until_it_is_forgotten(engine: Engine) -> None:
    tokens = claimed(engine, "a", "b", "c")
    assert engine.ack("q", [("a", tokens["a"]), ("b", tokens["b"])], holder="w:1",
                      codes=["s", "x"]) == [True, True]
    assert engine.ack("q", [("c", tokens["c"])]) == [True]  # no holder: no record
    a, b, c = engine.presence("q", ["a", "b", "c"])
    assert not a.queued and a.settled is not None
    assert (a.settled.code, a.settled.attempt, a.settled.holder, a.settled.token) == (
        "s", tokens["a"], "w:1", tokens["a"])
    assert b.settled is not None and b.settled.code == "x" and c.settled is None
    assert engine.forget_settled("q", ["a", "b", "zz"], keep_ms=3_600_000) == 2
    assert [p.settled for p in engine.presence("q", ["a", "b"])] == [None, None]


def test_a_refused_ack_leaves_no_record(engine: Engine) -> None:
    tokens = claimed(engine, "a")
    assert engine.ack("q", [("a", tokens["a"] + 1)], holder="w:1") == [False]
    assert engine.presence("q", ["a"])[0].settled is None


def test_a_job_cancelled_while_it_ran_is_recorded_as_cancelled(engine: Engine) -> None:
    tokens = claimed(engine, "a")
    engine.cancel("q", "a")  # running: only marked
    assert engine.nack("q", [("a", tokens["a"], 0)], holder="w:1") == [NackOutcome.CANCELLED]
    settled = engine.presence("q", ["a"])[0].settled
    assert settled is not None and (settled.code, settled.holder, settled.token) == (
        "c", "w:1", tokens["a"])


def test_a_record_keeps_the_token_of_the_lease_it_settled() -> None:
    """"<code> <attempt> <holder> <token>"; the older "<code> <attempt> <holder>" (written
    before tokens were kept, read during an upgrade) has none; a holder may hold spaces."""
    assert Settled.parse("s 2 w 1 7", 5) == Settled("s", 2, "w 1", 5, 7)
    assert Settled.parse("x 1 host:9", 5) == Settled("x", 1, "host:9", 5, None)
    assert Settled.parse("c 1 w x", 5) == Settled("c", 1, "w x", 5, None)


def test_old_records_are_dropped_by_any_later_forget(engine: Engine) -> None:
    tokens = claimed(engine, "old")
    engine.ack("q", [("old", tokens["old"])], holder="w:1", now_ms=NOW)
    assert engine.forget_settled("q", [], keep_ms=1000, now_ms=NOW + 500) == 0
    assert engine.presence("q", ["old"])[0].settled is not None  # not old yet
    engine.forget_settled("q", [], keep_ms=1000, now_ms=NOW + 2000)
    assert engine.presence("q", ["old"])[0].settled is None


def test_a_planted_record_that_is_not_ours_is_ignored(engine: Engine) -> None:
    k = engine.keys("q")
    engine.client.zadd(k.settled, {"a": NOW, "b": NOW})
    engine.client.hset(k.settled_by, mapping={"a": "zz 1 w", "b": "s nope w"})
    assert [p.settled for p in engine.presence("q", ["a", "b"])] == [None, None]


def test_recover_waits_for_an_unbroken_run_of_the_callers_calls(engine: Engine) -> None:
    claimed(engine, "a")  # leased at NOW for 1 s: expired from NOW + 1000
    contact = Contact(need_ms=3000, gap_ms=3000)
    assert engine.recover("q", now_ms=NOW + 5000, contact=contact) == []  # a first call
    assert engine.recover("q", now_ms=NOW + 7000, contact=contact) == []  # 2 s of contact
    assert [r.id for r in engine.recover("q", now_ms=NOW + 8000, contact=contact)] == ["a"]


def test_a_gap_longer_than_allowed_starts_a_new_run(engine: Engine) -> None:
    claimed(engine, "a", lease_ms=20_000)  # expired from NOW + 20 s
    contact = Contact(need_ms=3000, gap_ms=3000)
    for at in range(NOW + 1000, NOW + 19_000, 2000):  # an unbroken run before the expiry
        assert engine.recover("q", now_ms=at, contact=contact) == []
    # A stall: the next call comes 8 s later, after the expiry. Its run starts again there.
    assert engine.recover("q", now_ms=NOW + 25_000, contact=contact) == []
    assert engine.recover("q", now_ms=NOW + 27_000, contact=contact) == []
    assert [r.id for r in engine.recover("q", now_ms=NOW + 28_000, contact=contact)] == ["a"]


def test_the_ack_stream_acks_in_order_and_records(engine: Engine) -> None:
    stream = engine.ack_stream("w:2")
    if stream is None:  # a cluster client: no single connection
        return
    tokens = claimed(engine, "a", "b")
    assert stream.send("q", [("a", tokens["a"])], ["s"], "first")
    assert stream.send("q", [("b", tokens["b"] + 5)], ["s"], "second")  # a stale token
    replies = []
    deadline = time.monotonic() + 10
    while len(replies) < 2 and time.monotonic() < deadline:
        replies += stream.read(0.5)
    assert [(r.tag, r.acked, r.error) for r in replies] == [
        ("first", [True], None), ("second", [False], None)]
    assert engine.presence("q", ["a"])[0].settled is not None
    assert engine.inspect("q", "b").place == "inflight"
    stream.close()
