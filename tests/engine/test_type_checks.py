"""lib.lua's wrong_type: one EXISTS counts the declared keys that exist, then a TYPE each,
the keys a busy queue has first, until every existing key was typed. A key of the wrong
type is caught wherever it stands in that order, before any write (real Redis)."""

from __future__ import annotations

import pytest
import redis

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
