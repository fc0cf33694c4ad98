"""Poison entries planted in Redis next to healthy jobs (what an attacker with access to
Redis, or a bug, can leave there): each is set aside alone, the rest of the batch is
served, no script fails half-way and no reply makes Python raise after a script has
committed. Real redis-server (7.x and 6.2) and a real Redis Cluster (``redis_target``)."""

from __future__ import annotations

import logging
import re

import pytest

from django_delayq.core.events import EventStream, stream_key
from django_delayq.engine import Engine, NackOutcome, NewJob, bad_id, scripts
from django_delayq.engine.scripts import TooManyArguments

NOW = 1_800_000_000_000
LEASE = 30_000


def healthy(engine: Engine, *ids: str, at: int = NOW - 10) -> None:
    assert engine.enqueue("q", [NewJob(id=i, at_ms=at) for i in ids], now_ms=NOW) == len(ids)


def in_place(engine: Engine, raw: bytes | str) -> list[str]:
    k = engine.keys("q")
    c = engine.client
    return [name for name, key in (("pending", k.pending), ("inflight", k.inflight),
                                   ("dead", k.dead)) if c.zscore(key, raw) is not None]


def housekeeping_survives(engine: Engine) -> None:
    """Every read-side call still answers (none raises on what is left in Redis)."""
    engine.stats("q", now_ms=NOW)
    engine.expiring("q", within_ms=10**15)
    engine.recover("q", now_ms=NOW)
    engine.inspect("q", "a")


@pytest.mark.parametrize("raw, reason", [
    (b"\xff\xfebad", "not UTF-8"),
    (b"x" * 300, "longer than 256 bytes"),
    (b"line\nbreak", "control characters"),
    (b"nul\x00id", "control characters"),
    (b"", "empty id"),
])
def test_claim_removes_an_id_that_cannot_be_a_job_id(
        engine: Engine, raw: bytes, reason: str, caplog: pytest.LogCaptureFixture) -> None:
    k = engine.keys("q")
    healthy(engine, "a", "b")
    engine.client.zadd(k.pending, {raw: NOW - 20})
    engine.client.hset(k.attempts, raw, 7)
    with caplog.at_level(logging.WARNING, logger="django_delayq.engine.engine"):
        result = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert [(j.id, j.token) for j in result.jobs] == [("a", 1), ("b", 1)]
    [aside] = result.set_aside
    assert aside.removed and reason in aside.reason
    assert in_place(engine, raw) == [] and not engine.client.hexists(k.attempts, raw)
    assert engine.client.zcard(k.inflight) == 2
    assert "removed from Redis" in caplog.text and reason in caplog.text
    assert engine.ack("q", [(j.id, j.token) for j in result.jobs]) == [True, True]
    housekeeping_survives(engine)


def test_claim_sets_aside_a_job_whose_attempts_value_is_not_a_number(engine: Engine) -> None:
    """The rest of the due batch is claimed (nothing is dropped from Redis), and the
    poison job is in dead, where a requeue gives it fresh attempts."""
    k = engine.keys("q")
    healthy(engine, "a", "b", "c")
    engine.client.hset(k.attempts, mapping={"b": "abc", "c": 2})
    result = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert [(j.id, j.token) for j in result.jobs] == [("a", 1), ("c", 3)]
    assert [(s.id, s.removed) for s in result.set_aside] == [("b", False)]
    assert "attempts" in result.set_aside[0].reason
    assert in_place(engine, "b") == ["dead"] and not engine.client.hexists(k.attempts, "b")
    assert engine.client.zcard(k.pending) == 0
    housekeeping_survives(engine)
    engine.requeue("q", "b", now_ms=NOW)
    [again] = engine.claim("q", 10, LEASE, now_ms=NOW).jobs
    assert (again.id, again.attempt, again.token) == ("b", 1, NOW + 1)  # the clock's


@pytest.mark.parametrize("score", ["-inf", "+inf"])
def test_a_score_that_is_not_a_time_is_set_aside_uncharged(engine: Engine, score: str) -> None:
    """-inf sorts first in the due range, +inf never comes due: both go to dead without an
    attempt charged, and the jobs claimed with them get token 1."""
    k = engine.keys("q")
    healthy(engine, "a", "b")
    engine.client.zadd(k.pending, {"m": float(score)})
    result = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert [(j.id, j.token, j.due_ms) for j in result.jobs] == [("a", 1, NOW - 10),
                                                                 ("b", 1, NOW - 10)]
    assert [(s.id, s.removed) for s in result.set_aside] == [("m", False)]
    assert "not a time" in result.set_aside[0].reason
    assert in_place(engine, "m") == ["dead"] and not engine.client.hexists(k.attempts, "m")
    assert result.next_due_ms is None
    housekeeping_survives(engine)


def test_a_score_beyond_year_9999_that_is_due_is_not_handed_out(engine: Engine) -> None:
    k = engine.keys("q")
    healthy(engine, "a")
    engine.client.zadd(k.pending, {"old": -1e300})
    result = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert [j.id for j in result.jobs] == ["a"]
    assert [s.id for s in result.set_aside] == ["old"]


def test_poison_is_set_aside_on_promotion_and_the_limit_is_filled(engine: Engine) -> None:
    """Poison in pending is met while promoting due jobs (bounded by MAX_PROMOTE), not
    leased: it takes no place of the batch."""
    k = engine.keys("q")
    healthy(engine, "a", "b", "c", "d")
    engine.client.zadd(k.pending, {b"\xc0\xaf": NOW - 50, "inf": float("-inf")})
    first = engine.claim("q", 3, LEASE, now_ms=NOW)
    assert len(first.set_aside) == 2 and [j.id for j in first.jobs] == ["a", "b", "c"]
    assert first.next_due_ms == NOW - 10
    assert engine.client.zcard(k.pending) == 0
    assert [j.id for j in engine.claim("q", 3, LEASE, now_ms=NOW).jobs] == ["d"]


def test_a_planted_ready_entry_that_is_not_a_ready_score_goes_dead(engine: Engine) -> None:
    k = engine.keys("q")
    healthy(engine, "a")
    engine.client.zadd(k.ready, {"neg": -5, b"\xff": 1, "inf": float("inf")})
    result = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert [j.id for j in result.jobs] == ["a"]
    assert sorted((s.id, s.removed) for s in result.set_aside) == [
        ("\\xff", True), ("inf", False), ("neg", False)]
    assert engine.client.zcard(k.ready) == 0 and in_place(engine, "neg") == ["dead"]


# Ids around the edges of UTF-8: what Python's strict decoding accepts is what claim
# hands out; everything else is set aside (the Lua check and bad_id agree).
TRICKY = [b"caf\xc3\xa9", "日本".encode(), "\U0001f600".encode(), b"sp ace", b"tab\t",
          b"del\x7f", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80",
          b"\xe2\x82", b"\x80", b"\xf8\x88\x80\x80\x80", b"\xe0\x80\xaf", b"ok~!"]


def _python_accepts(raw: bytes) -> bool:
    try:
        return bad_id(raw.decode()) is None
    except UnicodeDecodeError:
        return False


def test_lua_and_python_agree_on_what_is_a_job_id(engine: Engine) -> None:
    k = engine.keys("q")
    engine.client.zadd(k.pending, {raw: NOW - i for i, raw in enumerate(TRICKY)})
    result = engine.claim("q", 100, LEASE, now_ms=NOW)
    claimed = {j.id.encode() for j in result.jobs}
    assert claimed == {raw for raw in TRICKY if _python_accepts(raw)}
    assert len(result.set_aside) == len(TRICKY) - len(claimed)
    assert all(s.removed for s in result.set_aside)
    assert all(s.id.isascii() for s in result.set_aside)  # shown escaped, for the log


def test_enqueue_refuses_an_id_claim_would_set_aside(engine: Engine) -> None:
    for bad in ("", "x" * 257, "a\nb", "é" * 129):
        with pytest.raises(ValueError, match="job id"):
            engine.enqueue("q", [NewJob(id="fine"), NewJob(id=bad)], now_ms=NOW)
    assert engine.client.zcard(engine.keys("q").pending) == 0  # nothing was sent
    assert engine.enqueue("q", [NewJob(id="é" * 128)], now_ms=NOW) == 1


@pytest.mark.parametrize("name, plant", [
    ("attempts", lambda c, key: c.set(key, "not a hash")),
    ("jobs", lambda c, key: c.rpush(key, "x")),
    ("dead", lambda c, key: c.set(key, "1")),
    ("inflight", lambda c, key: c.hset(key, "f", "v")),
])
def test_a_key_of_the_wrong_type_is_moved_aside_and_the_batch_claimed(
        engine: Engine, name: str, plant: object, caplog: pytest.LogCaptureFixture) -> None:
    k = engine.keys("q")
    healthy(engine, "a", "b")
    key = getattr(k, name)
    plant(engine.client, key)  # type: ignore[operator]
    with caplog.at_level(logging.WARNING, logger="django_delayq.engine.scripts"):
        result = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert [(j.id, j.token) for j in result.jobs] == [("a", 1), ("b", 1)]
    assert re.search(r"is a \w+, not a \w+: moved aside", caplog.text)
    [moved] = list(engine.client.scan_iter(match=key.replace("{", "\\{").replace(
        "}", "\\}") + ":damaged:*"))
    assert engine.client.type(moved) != engine.client.type(key)
    assert engine.ack("q", [(j.id, j.token) for j in result.jobs]) == [True, True]
    housekeeping_survives(engine)


def test_a_pending_key_of_the_wrong_type_is_moved_aside(engine: Engine) -> None:
    k = engine.keys("q")
    engine.client.set(k.pending, "garbage")
    assert engine.claim("q", 10, LEASE, now_ms=NOW).jobs == []
    healthy(engine, "a")
    assert [j.id for j in engine.claim("q", 10, LEASE, now_ms=NOW).jobs] == ["a"]


ENQUEUE_TYPED = [k.name for k in scripts.load("enqueue").keys if k.kind]


@pytest.mark.parametrize("name", ENQUEUE_TYPED)
@pytest.mark.parametrize("job", [
    NewJob(id="new", at_ms=NOW + 5),  # a plain job: the reads find the wrong type
    NewJob(id="new", at_ms=NOW - 5),  # due: straight to ready
    NewJob(id="new", at_ms=NOW + 5, priority=3, group="g"),  # every type checked first
], ids=["plain", "due", "grouped"])
def test_enqueue_moves_a_key_of_the_wrong_type_aside_before_any_write(
        engine: Engine, name: str, job: NewJob) -> None:
    k = engine.keys("q")
    key = getattr(k, name)
    planted = b"hash" if name == "epoch" else b"string"  # the epoch is a string
    if name == "epoch":
        engine.client.hset(key, "planted", "1")
    else:
        engine.client.set(key, "planted")
    others = [getattr(k, n.name) for n in scripts.load("enqueue").keys if n.name != name]
    written: list[int] = []
    original = scripts.move_aside

    def moving(client: object, *args: str) -> None:  # what the script wrote before it ended
        written.append(engine.client.exists(*others))
        original(client, *args)

    scripts.move_aside = moving
    try:
        assert engine.enqueue("q", [job], now_ms=NOW) == 1
    finally:
        scripts.move_aside = original
    if written:
        assert written == [0]  # the script ended before its first write
        assert engine.client.type(key) != planted  # moved aside, maybe written since
    else:  # a plain job never touches the priorities (nor their urgent index), nor the
        # groups unless due, and writes the epoch only where there is none
        assert job.priority == 0 and name in ("prio", "urgent", "group", "group_ready",
                                              "group_turns", "epoch")
        assert engine.client.type(key) == planted
    assert engine.inspect("q", "new").place in ("pending", "ready")
    assert engine.enqueue("q", [job], now_ms=NOW) == 0  # known: still idempotent


def test_recover_sets_aside_poison_leases_and_recovers_the_rest(engine: Engine) -> None:
    k = engine.keys("q")
    healthy(engine, "a", "b")
    engine.mark_started(engine.claim("q", 10, 100, now_ms=NOW).jobs)  # they ran
    engine.client.zadd(k.inflight, {b"\xff": NOW, "c": NOW, "stuck": float("inf")})
    engine.client.hset(k.attempts, "c", "1.5")
    assert sorted(engine.expiring("q", within_ms=10**15)) == ["a", "b", "c"]
    aside: list = []
    found = engine.recover("q", now_ms=NOW + 100, set_aside=aside)
    assert sorted((r.id, r.outcome, r.attempts) for r in found) == [
        ("a", NackOutcome.RETRYING, 1), ("b", NackOutcome.RETRYING, 1),
        ("stuck", NackOutcome.NOT_STARTED, 0)]  # planted: never claimed, never started
    assert sorted((s.id, s.removed) for s in aside) == [("\\xff", True), ("c", False)]
    assert in_place(engine, "c") == ["dead"] and in_place(engine, b"\xff") == []
    assert engine.client.zcard(k.inflight) == 0
    assert [(j.id, j.token) for j in engine.claim("q", 10, LEASE, now_ms=NOW + 100).jobs] == [
        ("a", 2), ("b", 2), ("stuck", 1)]


def test_stats_and_inspect_read_poison_without_failing(engine: Engine) -> None:
    k = engine.keys("q")
    healthy(engine, "a", at=NOW + 5)
    engine.client.zadd(k.pending, {"lo": float("-inf"), "hi": float("inf")})
    engine.client.zadd(k.inflight, {"run": float("inf")})
    engine.client.hset(k.attempts, "run", "x")
    st = engine.stats("q", now_ms=NOW)
    assert (st.ready, st.scheduled, st.inflight) == (1, 2, 1)
    assert st.next_due_ms == NOW + 5 and st.oldest_ready_ms is None
    loc = engine.inspect("q", "run")
    assert (loc.place, loc.score_ms, loc.attempts) == ("inflight", None, -1)
    assert engine.inspect("q", "hi").score_ms is None


def test_settling_calls_never_fail_on_corrupt_tokens(engine: Engine) -> None:
    k = engine.keys("q")
    healthy(engine, "a", "b")
    a, b = engine.claim("q", 10, LEASE, now_ms=NOW).jobs
    engine.client.hset(k.attempts, "b", "zz")
    assert engine.extend("q", [("a", a.token), ("b", b.token)], LEASE, now_ms=NOW) == [
        True, False]
    assert engine.nack("q", [("b", b.token, 0)], now_ms=NOW) == [NackOutcome.LEASE_LOST]
    assert engine.release("q", [b]) == [False]
    assert engine.ack("q", [("a", a.token), ("b", b.token)]) == [True, False]


# -- bounds ----------------------------------------------------------------------------


def test_callers_split_lists_into_calls_within_the_bound(engine: Engine) -> None:
    n = 2 * scripts.MAX_ENQUEUE + 7
    ids = ["j%04d" % i for i in range(n)]
    assert engine.enqueue("q", [NewJob(id=i, at_ms=NOW) for i in ids], now_ms=NOW) == n
    claimed = []
    while batch := engine.claim("q", 10**6, LEASE, now_ms=NOW).jobs:
        assert len(batch) <= scripts.MAX_CLAIM
        claimed += batch
    assert len(claimed) == n
    leases = [(j.id, j.token) for j in claimed]
    assert engine.extend("q", leases, LEASE, now_ms=NOW) == [True] * n
    half = n // 2
    assert engine.release("q", claimed[:10]) == [True] * 10
    assert engine.nack("q", [(i, t, None) for i, t in leases[10:half]], now_ms=NOW) == [
        NackOutcome.DEAD] * (half - 10)
    assert engine.ack("q", leases[half:]) == [True] * (n - half)
    engine.claim("q", 10, 1, now_ms=NOW)
    assert len(engine.recover("q", limit=10**6, now_ms=NOW + 10)) == 10


def test_a_script_refuses_a_call_beyond_its_bound(engine: Engine) -> None:
    k = engine.keys("q")
    args = [0, ""] + [v for i in range(scripts.MAX_ACK + 1) for v in ("x%d" % i, 1, "s")]
    with pytest.raises(TooManyArguments, match="ack.lua takes at most"):
        scripts.load("ack")(engine.client, scripts.keys_of("ack", k), args)


def test_each_header_states_the_bound_its_callers_use() -> None:
    expected = {"enqueue": scripts.MAX_ENQUEUE, "claim": scripts.MAX_CLAIM,
                "ack": scripts.MAX_ACK, "nack": scripts.MAX_NACK, "extend": scripts.MAX_EXTEND,
                "give_back": scripts.MAX_GIVE_BACK, "recover": scripts.MAX_RECOVER,
                "events_add": scripts.MAX_EVENTS,
                "purge": scripts.MAX_PURGE, "release_callable": scripts.MAX_RELEASE_CALLABLE,
                "forget_settled": scripts.MAX_FORGET, "reenqueue": scripts.MAX_REENQUEUE,
                "mark": scripts.MAX_MARK}
    for name in scripts.SCRIPT_NAMES:
        source = scripts._read(name)
        for part in ("-- KEYS:", "-- Returns:", "-- Cost:"):
            assert part in source, (name, part)
        cost = source[source.index("-- Cost:"):].split("\n-- ")[0]
        if name in expected:
            assert f"at most {expected[name]:,} " in cost, (name, cost)
            assert "scripts.MAX_" in cost, name
        else:
            assert "one job per call" in cost or "constant number" in cost, (name, cost)
    assert f"{scripts.MAX_PROMOTE:,} promoted" in scripts._read("claim")
    assert f"PROMOTE, TRIM = {scripts.MAX_PROMOTE}," in scripts._read("claim")
    assert f"local MAX_CLAIM = {scripts.MAX_CLAIM} " in scripts._read("claim")
    assert f"(1..{scripts.MAX_CLAIM}; more is capped)" in scripts._read("claim")
    assert scripts.MAX_PROMOTE >= scripts.MAX_CLAIM  # a claim on a backlog gets a full batch
    assert scripts.RECONCILE_CHUNK <= scripts.MAX_ENQUEUE
    assert f"{scripts.MAX_EVENT_ARGS:,} arguments per call" in scripts._read(
        "events_add")


# -- the event stream ---------------------------------------------------------------------


def _stream(engine: Engine) -> tuple[EventStream, str]:
    key = stream_key(engine.prefix)
    return EventStream(engine.client, key, maxlen=100_000), key


def _event(i: int) -> dict[str, str]:
    return {"event": "succeeded", "job": "j%05d" % i, "queue": "q", "ts_ms": str(NOW + i)}


def test_events_are_written_in_bounded_calls(engine: Engine) -> None:
    stream, key = _stream(engine)
    for i in range(2 * scripts.MAX_EVENTS + 3):
        stream.add(_event(i))
    assert stream.flush() == 2 * scripts.MAX_EVENTS + 3
    entries = engine.client.xrange(key)
    assert [e[1][b"job"] for e in entries] == [b"j%05d" % i
                                              for i in range(2 * scripts.MAX_EVENTS + 3)]
    stream.close()


def test_a_damaged_event_stream_never_fails_the_flush(engine: Engine,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    stream, key = _stream(engine)
    engine.client.xadd(key, {"planted": "1"}, id="18446744073709551615-18446744073709551615")
    stream.add(_event(1))
    with caplog.at_level(logging.WARNING, logger="django_delayq.core.events"):
        stream.flush()
    assert "refused 1 event" in caplog.text and stream.dropped == 1
    engine.client.delete(key)
    engine.client.set(key, "not a stream")
    stream.add(_event(2))
    assert stream.flush() == 1
    assert engine.client.type(key) == b"stream" and engine.client.xlen(key) == 1
    stream.close()
    engine.client.delete(key)


def test_a_reply_item_python_cannot_decode_is_removed_from_every_place(
        engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    """The scripts set such an id aside themselves; one a reply carries all the same is
    removed from the queue's places by the reply's decoding, with a WARNING, and the other
    items of the reply are decoded."""
    raw = b"j\xff"
    healthy(engine, "a")
    k, c = engine.keys("q"), engine.client
    for key in (k.pending, k.ready, k.inflight):
        c.zadd(key, {raw: NOW})
    for key in (k.jobs, k.attempts, k.prio, k.group):
        c.hset(key, raw, "1")
    c.sadd(k.cancel, raw)
    reply = [NOW, 0, raw, 1, 2, b"a", 1, 1]
    with caplog.at_level(logging.WARNING):
        found, aside, start = engine._decoded(
            "q", "recover", reply, 1, 3, lambda r: (r[0].decode(), int(r[1])))
    assert (found, start) == ([("a", 1)], 2)
    assert [(a.id, a.reason, a.removed) for a in aside] == [
        ("j\\xff", "recovered id could not be decoded", True)]
    assert "set aside job b'j\\xff'" in caplog.text
    assert [key for key in (k.pending, k.ready, k.inflight) if c.zscore(key, raw)] == []
    assert [key for key in (k.jobs, k.attempts, k.prio, k.group) if c.hexists(key, raw)] == []
    assert not c.sismember(k.cancel, raw)
    assert c.zscore(k.ready, "a") is not None  # the healthy job stays where it was


def test_an_envelope_that_is_not_utf8_is_set_aside(redis_target) -> None:  # type: ignore[no-untyped-def]
    """Even a client decoding every reply (decode_responses) never meets it."""
    client = redis_target(decode_responses=True)
    engine = Engine(client, prefix="env%d" % id(client))
    engine.enqueue("q", [NewJob(id="a", envelope='["tests.jobs.noop"]', at_ms=NOW),
                         NewJob(id="b", envelope='["tests.jobs.noop"]', at_ms=NOW)], now_ms=NOW)
    raw = redis_target()
    raw.hset(engine.keys("q").jobs, "b", b'["\xff"]')
    result = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert [j.id for j in result.jobs] == ["a"]
    assert [(s.id, s.reason) for s in result.set_aside] == [("b", "envelope is not UTF-8")]
    engine.purge("q")
    raw.close()
    client.close()
