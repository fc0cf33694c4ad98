"""lib.lua's wrong_type: one EXISTS counts the declared keys that exist, then a TYPE each,
the keys a busy queue has first, until every existing key was typed. A key of the wrong
type is caught wherever it stands in that order, before any write (real Redis)."""

from __future__ import annotations

import pytest
import redis
from redis.cluster import RedisCluster

from django_delayq.engine import Engine, NewJob, scripts
from tests.conftest import unique_prefix

NOW = 1_800_000_000_000
LEASE = 30_000
CLAIM = scripts.load("claim")
CLAIM_TYPED = [k.name for k in CLAIM.keys if k.kind]


def test_the_check_order_puts_a_busy_queues_keys_first() -> None:
    order = [CLAIM.keys[i - 1].name for i in scripts.check_order(CLAIM.keys)]
    assert order[:6] == ["ready", "inflight", "attempts", "pending", "record", "runs"]
    assert sorted(order) == sorted(k.name for k in CLAIM.keys)
    assert "order = '%s'" % "".join("\\%03d" % i for i in scripts.check_order(CLAIM.keys)) \
        in CLAIM.source


@pytest.mark.parametrize("name", CLAIM_TYPED)
def test_a_wrong_type_is_caught_wherever_the_key_stands(engine: Engine, name: str) -> None:
    k = engine.keys("q")
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW - 10) for i in ("a", "b")], now_ms=NOW)
    record = k.claim_record("me")
    engine.client.set(record, "n0|")  # a busy queue's claimer has a record
    keys = scripts.keys_of("claim", k, record=record)
    [(i, kind)] = [(i, x.kind) for i, x in enumerate(CLAIM.keys, 1) if x.name == name]
    engine.client.delete(keys[i - 1])
    if kind == "string":
        engine.client.hset(keys[i - 1], "f", "v")
    else:
        engine.client.set(keys[i - 1], "planted")
    before = {key: engine.client.dump(key) for key in keys}
    engine.client.script_load(CLAIM.source)
    found = "hash" if kind == "string" else "string"
    with pytest.raises(redis.ResponseError, match="DELAYQ-WRONGTYPE %d %s %s" % (i, found, kind)):
        engine.client.evalsha(CLAIM.sha, len(keys), *keys, NOW, 10, LEASE, "n1")
    assert {key: engine.client.dump(key) for key in keys} == before  # nothing written


def test_a_plain_claim_types_only_the_keys_that_exist(any_redis_server) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(redis.Redis.from_url(any_redis_server.url), prefix=unique_prefix())
    engine.enqueue("q", [NewJob(id=str(i), at_ms=NOW - 10) for i in range(20)], now_ms=NOW)
    engine.claim("q", 5, LEASE, now_ms=NOW)  # loaded; inflight, attempts, the record exist
    engine.client.config_resetstat()
    assert len(engine.claim("q", 5, LEASE, now_ms=NOW).jobs) == 5
    stats = engine.client.info("commandstats")
    # ready, inflight, attempts, then pending (absent), the record: all that exist typed
    assert stats["cmdstat_type"]["calls"] == 5, stats["cmdstat_type"]
    assert stats["cmdstat_exists"]["calls"] <= 6  # the count, paused, groups, jobs, prio
    engine.client.close()


@pytest.mark.parametrize("dead", [True, False], ids=["requeue", "reschedule"])
def test_a_move_meeting_a_wrong_typed_urgent_index_loses_nothing(engine: Engine,
                                                                dead: bool) -> None:
    """The planted key is caught before any write (moved aside by the engine, which calls
    again): the job is back in line, not half-moved and lost."""
    k = engine.keys("q")
    engine.enqueue("q", [NewJob(id="x", at_ms=NOW - 5, envelope='["x"]')], now_ms=NOW)
    if dead:
        [c] = engine.claim("q", 1, LEASE, now_ms=NOW).jobs
        engine.nack("q", [("x", c.token, None)], now_ms=NOW)
    engine.client.set(k.urgent, "planted")
    if dead:
        engine.requeue("q", "x", now_ms=NOW)
    else:
        engine.reschedule("q", "x", now_ms=NOW)
    assert engine.client.type(k.urgent) != b"string"  # set aside
    assert engine.inspect("q", "x").place in ("pending", "ready")
    assert engine.client.hexists(k.jobs, "x")


@pytest.mark.parametrize("how", ["nack", "release", "defer", "enqueue"])
def test_a_write_of_the_urgent_index_meeting_a_wrong_type_loses_nothing(engine: Engine,
                                                                        how: str) -> None:
    """Every script writing the urgent index types it first (keys.py: one type per key):
    the planted key is moved aside before any write and the call goes through whole."""
    k = engine.keys("q")
    job = NewJob(id="x", at_ms=NOW + 60_000 if how == "enqueue" else NOW - 5, priority=5,
                 envelope='["x"]')
    if how != "enqueue":
        engine.enqueue("q", [job], now_ms=NOW)
        [c] = engine.claim("q", 1, LEASE, now_ms=NOW).jobs
    engine.client.set(k.urgent, "planted")
    if how == "nack":
        assert [int(o) for o in engine.nack("q", [("x", c.token, 60_000)], now_ms=NOW)] == [1]
    elif how == "release":
        assert engine.release("q", [c], now_ms=NOW) == [True]
    elif how == "defer":
        assert engine.defer("q", [("x", c.token, NOW + 60_000)], now_ms=NOW) == [True]
    else:
        assert engine.enqueue("q", [job], now_ms=NOW) == 1
    assert engine.client.type(k.urgent) != b"string"  # set aside
    assert engine.inspect("q", "x").place == "pending"
    assert engine.client.zcard(k.inflight) == 0


@pytest.mark.parametrize("name", ["attempts", "runs", "inflight"])
@pytest.mark.parametrize("many", [False, True], ids=["one", "many"])
def test_a_mark_meeting_a_key_of_the_wrong_type_moves_it_aside(engine: Engine, name: str,
                                                               many: bool) -> None:
    """mark.lua types nothing first (its usual call is three commands): a read or its one
    write failing on a planted key writes nothing, and the engine moves the key aside."""
    k = engine.keys("q")
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW - 5) for i in ("a", "b")], now_ms=NOW)
    jobs = engine.claim("q", 2 if many else 1, LEASE, now_ms=NOW).jobs
    engine.client.delete(getattr(k, name))
    engine.client.set(getattr(k, name), "planted")
    marked = engine.mark_started(jobs)
    assert engine.client.type(getattr(k, name)) != b"string"  # moved aside
    if name == "runs":  # the leases stand: marked
        assert marked == len(jobs)
        assert sorted(engine.client.hkeys(k.runs)) == sorted(j.id.encode() for j in jobs)
    else:  # the leases went with the key
        assert marked == 0


def test_a_failed_write_under_pcall_keeps_its_redis_error(engine: Engine) -> None:
    """A script whose reads and writes run under pcall (mark.lua, enqueue.lua) re-raises
    any other failure as Redis gave it, so redis-py knows its kind (an OOM here; a
    READONLY after a failover is how a Sentinel client notices the demoted master)."""
    engine.enqueue("q", [NewJob(id="a", at_ms=NOW - 5)], now_ms=NOW)
    jobs = engine.claim("q", 1, LEASE, now_ms=NOW).jobs
    every = {"target_nodes": "all"} if isinstance(engine.client, RedisCluster) else {}
    engine.client.config_set("maxmemory", 1, **every)
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError, match="^command not allowed"):
            engine.mark_started(jobs)
    finally:
        engine.client.config_set("maxmemory", 0, **every)
    assert engine.mark_started(jobs) == 1
