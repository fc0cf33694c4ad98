"""Settled records, the ack stream and recovery's contact condition, on a real Redis
(every binary we have, and the cluster where a test says so)."""

from __future__ import annotations

import time

from django_delayq.engine import Contact, Engine, NackOutcome, NewJob

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
    assert (a.settled.code, a.settled.attempt, a.settled.holder) == ("s", tokens["a"], "w:1")
    assert b.settled is not None and b.settled.code == "x" and c.settled is None
    assert engine.forget_settled("q", ["a", "b", "zz"], keep_ms=3_600_000) == 2
    assert [p.settled for p in engine.presence("q", ["a", "b"])] == [None, None]


def test_an_ack_sent_again_after_a_lost_reply_is_answered_from_its_own_record(
        engine: Engine) -> None:
    """The first ack took the job out (its reply lost): the same holder's ack of the same
    token and code is acked again, changing nothing; any other ack of the job is refused,
    as is one of a holder that kept no record."""
    tokens = claimed(engine, "a", "b")
    a, b = ("a", tokens["a"]), ("b", tokens["b"])
    assert engine.ack("q", [a], holder="w 1:abc", codes=["s"]) == [True]
    assert engine.ack("q", [b]) == [True]  # no holder: no record
    assert engine.ack("q", [a, b], holder="w 1:abc", codes=["s", "s"]) == [True, False]
    assert engine.ack("q", [a], holder="w 1:abd") == [False]  # another worker
    assert engine.ack("q", [a], holder="w 1:abc", codes=["x"]) == [False]  # another outcome
    assert engine.ack("q", [("a", tokens["a"] + 1)], holder="w 1:abc") == [False]  # delivery
    settled = engine.presence("q", ["a"])[0].settled
    assert settled is not None
    assert (settled.code, settled.attempt, settled.holder) == ("s", tokens["a"], "w 1:abc")
    k = engine.keys("q")
    assert engine.client.hgetall(k.settled_tokens) == {b"a": str(tokens["a"]).encode()}
    assert engine.forget_settled("q", ["a"], keep_ms=3_600_000) == 1
    assert engine.client.exists(k.settled_tokens) == 0  # dropped with the record
    assert engine.ack("q", [a], holder="w 1:abc") == [False]  # its row landed: no record


def test_a_stale_ack_is_refused_whoever_settled_the_job_since(engine: Engine) -> None:
    """A worker stalled past its leases acks its old copies: refused, whether the delivery
    that ran since was settled by another worker ("a") or by this one ("b"), while that
    record is kept and once it is forgotten."""
    stale = claimed(engine, "a", "b", lease_ms=10)
    assert {r.id for r in engine.recover("q", now_ms=NOW + 20)} == {"a", "b"}
    copies = {j.id: j.token for j in engine.claim("q", 2, 1000, now_ms=NOW + 30).jobs}
    assert copies.keys() == {"a", "b"} and all(copies[i] > stale[i] for i in copies)
    assert engine.ack("q", [("a", copies["a"])], holder="w:2") == [True]
    assert engine.ack("q", [("b", copies["b"])], holder="w:1") == [True]
    old = [("a", stale["a"]), ("b", stale["b"])]
    assert engine.ack("q", old, holder="w:1") == [False, False]
    assert engine.forget_settled("q", ["a", "b"], keep_ms=3_600_000) == 2
    assert engine.ack("q", old, holder="w:1") == [False, False]


def _read_as_before(raw: bytes) -> tuple[str, int, str] | None:
    """A settled record read as workers before lease tokens were kept read it (their
    ``Settled.parse``), as one may during a rolling deploy: code, attempt, holder."""
    parts = raw.decode().split(" ", 2)
    if len(parts) != 3 or parts[0] not in ("s", "x", "c") or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), parts[2]


def test_records_read_as_before_name_their_holder(engine: Engine) -> None:
    """The record's format is the one earlier workers read: their reconciler finds the
    live worker that holds a pending flush by its name (the token is kept apart)."""
    tokens = claimed(engine, "a", "b")
    assert engine.ack("q", [("a", tokens["a"])], holder="w1:abc123") == [True]
    engine.cancel("q", "b")  # running: only marked
    assert engine.nack("q", [("b", tokens["b"], 0)],
                       holder="my host:1:abc") == [NackOutcome.CANCELLED]
    raw = engine.client.hgetall(engine.keys("q").settled_by)
    assert _read_as_before(raw[b"a"]) == ("s", tokens["a"], "w1:abc123")
    assert _read_as_before(raw[b"b"]) == ("c", tokens["b"], "my host:1:abc")
    assert engine.client.hgetall(engine.keys("q").settled_tokens) == {
        b"a": str(tokens["a"]).encode(), b"b": str(tokens["b"]).encode()}


def test_a_record_an_earlier_worker_wrote_is_no_workers_own(engine: Engine) -> None:
    """A record with no token beside it (a worker before tokens were kept wrote it) answers
    no ack sent again: refused, even for its holder and code."""
    tokens = claimed(engine, "a")
    k = engine.keys("q")
    assert engine.ack("q", [("a", tokens["a"])], holder="w:1") == [True]
    engine.client.hdel(k.settled_tokens, "a")  # as an earlier worker's ack left it
    assert engine.ack("q", [("a", tokens["a"])], holder="w:1") == [False]
    settled = engine.presence("q", ["a"])[0].settled
    assert settled is not None and (settled.code, settled.holder) == ("s", "w:1")


def test_a_refused_ack_leaves_no_record(engine: Engine) -> None:
    tokens = claimed(engine, "a")
    assert engine.ack("q", [("a", tokens["a"] + 1)], holder="w:1") == [False]
    assert engine.presence("q", ["a"])[0].settled is None


def test_a_job_cancelled_while_it_ran_is_recorded_as_cancelled(engine: Engine) -> None:
    tokens = claimed(engine, "a")
    engine.cancel("q", "a")  # running: only marked
    assert engine.nack("q", [("a", tokens["a"], 0)], holder="w:1") == [NackOutcome.CANCELLED]
    settled = engine.presence("q", ["a"])[0].settled
    assert settled is not None and settled.code == "c"


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
