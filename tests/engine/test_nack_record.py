"""A nack whose reply is lost, sent again: nack.lua keeps, per holder, what it made of each
job it settled (``{P:Q}:nacked:<holder>``), and answers the same nack sent again from it
(the first send's outcome) instead of refusing it as a lost lease. Real Redis."""

from __future__ import annotations

import pytest
import redis

from django_delayq.engine import Engine, NackOutcome, NewJob, scripts
from django_delayq.engine.shard_map import shard_index, shard_name
from tests.conftest import unique_prefix

NOW = 1_800_000_000_000
LEASE = 30_000
KEEP_MS = 3_600_000  # nack.lua's record keep (an hour)
NACK = scripts.load("nack")


def _claimed(engine: Engine, *ids: str, queue: str = "q") -> dict[str, int]:
    engine.enqueue(queue, [NewJob(id=i, at_ms=NOW - 10) for i in ids], now_ms=NOW)
    return {j.id: j.token for j in engine.claim(queue, 10, LEASE, now_ms=NOW).jobs}


def _space(engine: Engine, tag: str) -> dict[bytes, bytes | None]:
    """Every key under ``tag`` (the queue's hash tag), dumped."""
    pattern = "".join("\\" + c if c in "*?[]\\" else c for c in tag) + "*"
    return {key: engine.client.dump(key) for key in engine.client.scan_iter(match=pattern)}


@pytest.mark.parametrize(("delay", "cancel", "code"), [
    (0, False, NackOutcome.RETRYING), (None, False, NackOutcome.DEAD),
    (0, True, NackOutcome.CANCELLED)], ids=["retrying", "dead", "cancelled"])
def test_a_nack_sent_again_gets_the_first_sends_outcome(engine: Engine, delay: int | None,
                                                        cancel: bool, code: NackOutcome) -> None:
    tokens = _claimed(engine, "a", "b")
    if cancel:
        engine.cancel("q", "a")  # running: only marked
    rows = [("a", tokens["a"], delay), ("b", tokens["b"], 5_000)]
    assert engine.nack("q", rows, holder="w:1", now_ms=NOW) == [code, NackOutcome.RETRYING]
    before = _space(engine, engine.keys("q").tag)
    # the first reply lost: the same nack again, answered from the record, nothing changed
    assert engine.nack("q", rows, holder="w:1", now_ms=NOW + 5) == [code, NackOutcome.RETRYING]
    assert _space(engine, engine.keys("q").tag) == before
    record = engine.keys("q").tag + ":nacked:w:1"
    assert 0 < engine.client.pttl(record) <= KEEP_MS


def test_a_stale_token_is_still_refused(engine: Engine) -> None:
    """The lease was taken back and the job delivered again: the late nack of the old
    delivery is a lost lease, whether or not its holder nacked that job before."""
    first = _claimed(engine, "a")["a"]
    assert len(engine.recover("q", now_ms=NOW + LEASE + 1)) == 1
    second = engine.claim("q", 1, LEASE, now_ms=NOW + LEASE + 2).jobs[0].token
    assert engine.nack("q", [("a", first, 0)], holder="w:1", now_ms=NOW) == [
        NackOutcome.LEASE_LOST]  # no record of that token
    assert engine.nack("q", [("a", second, 0)], holder="w:1", now_ms=NOW) == [
        NackOutcome.RETRYING]
    engine.recover("q", now_ms=NOW + 3 * LEASE)  # claimed again: nacked under the third
    third = engine.claim("q", 1, LEASE, now_ms=NOW + 3 * LEASE + 1).jobs[0].token
    engine.recover("q", now_ms=NOW + 5 * LEASE)
    assert third > second and engine.nack("q", [("a", third, 0)], holder="w:1",
                                          now_ms=NOW) == [NackOutcome.LEASE_LOST]
    assert engine.nack("q", [("a", first, 0)], holder="w:1", now_ms=NOW) == [
        NackOutcome.LEASE_LOST]  # the record holds another token


def test_another_holders_record_does_not_answer(engine: Engine) -> None:
    token = _claimed(engine, "a")["a"]
    assert engine.nack("q", [("a", token, None)], holder="w:1", now_ms=NOW) == [NackOutcome.DEAD]
    assert engine.nack("q", [("a", token, None)], holder="w:2", now_ms=NOW) == [
        NackOutcome.LEASE_LOST]
    assert engine.nack("q", [("a", token, None)], now_ms=NOW) == [NackOutcome.LEASE_LOST]


def test_a_nack_without_a_holder_keeps_no_record(engine: Engine) -> None:
    token = _claimed(engine, "a")["a"]
    assert engine.nack("q", [("a", token, 0)], now_ms=NOW) == [NackOutcome.RETRYING]
    assert engine.nack("q", [("a", token, 0)], now_ms=NOW) == [NackOutcome.LEASE_LOST]
    assert [k for k in _space(engine, engine.keys("q").tag) if b":nacked:" in k] == []


def test_the_record_is_capped(engine: Engine) -> None:
    """A worker failing jobs without a pause never lets its record expire: past 1,000
    jobs it starts afresh, the call's own jobs recorded after that."""
    k = engine.keys("q")
    record = k.tag + ":nacked:w:1"
    engine.client.hset(record, mapping={"old%d" % i: "1 1" for i in range(1001)})
    token = _claimed(engine, "a")["a"]
    assert engine.nack("q", [("a", token, 0)], holder="w:1", now_ms=NOW) == [
        NackOutcome.RETRYING]
    assert engine.client.hgetall(record) == {b"a": b"%d 1" % token}


def test_each_shard_answers_from_its_own_record(redis_target) -> None:  # type: ignore[no-untyped-def]
    client = redis_target()
    engine = Engine(client, prefix=unique_prefix(), shards={"hot": 3})
    ids = {shard_index("j%d" % n, 3): "j%d" % n for n in range(40)}
    tokens = _claimed(engine, *ids.values(), queue="hot")
    rows = [(i, tokens[i], None) for i in ids.values()]
    assert engine.nack("hot", rows, holder="w:1") == [NackOutcome.DEAD] * 3
    assert engine.nack("hot", rows, holder="w:1") == [NackOutcome.DEAD] * 3
    for index, job_id in ids.items():
        record = engine.keys(shard_name("hot", index)).tag + ":nacked:w:1"
        assert engine.client.hkeys(record) == [job_id.encode()]
    client.close()


@pytest.mark.parametrize("kind", ["string", "zset"])
def test_a_record_of_the_wrong_type_is_moved_aside_before_any_write(engine: Engine,
                                                                     kind: str) -> None:
    k = engine.keys("q")
    record = k.tag + ":nacked:w:1"
    tokens = _claimed(engine, "a")
    if kind == "string":
        engine.client.set(record, "planted")
    else:
        engine.client.zadd(record, {"a": 1})
    keys = NACK.keys_of(k, nacked=record)
    before = {key: engine.client.dump(key) for key in keys if key != record}
    seen: list[dict[str, bytes | None]] = []
    original = scripts.move_aside

    def moving(client: object, *args: str) -> None:  # what the script wrote before it ended
        seen.append({key: engine.client.dump(key) for key in before})
        original(client, *args)

    scripts.move_aside = moving
    try:
        assert engine.nack("q", [("a", tokens["a"], 0)], holder="w:1", now_ms=NOW) == [
            NackOutcome.RETRYING]
    finally:
        scripts.move_aside = original
    assert seen == [before]  # noticed before the first write
    assert engine.client.type(record) == b"hash"  # the damaged one moved aside, then written


def _commands(engine: Engine, rows: list[tuple[str, int, int | None]]) -> dict[str, int]:
    engine.client.config_resetstat()
    engine.nack("q", rows, holder="w:1", now_ms=NOW)
    stats = engine.client.info("commandstats")
    return {name[8:]: s["calls"] for name, s in stats.items()
            if name not in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_config|resetstat",
                            "cmdstat_config")}


def test_what_the_record_costs(any_redis_server) -> None:  # type: ignore[no-untyped-def]
    """One HLEN, one HSET and one PEXPIRE a call with a holder; one HMGET of the record
    only when a triple was refused; its type read by the script's check."""
    engine = Engine(redis.Redis.from_url(any_redis_server.url), prefix=unique_prefix())
    tokens = _claimed(engine, "load", "a", "b", "c")
    engine.nack("q", [("load", tokens["load"], 0)], holder="w:1", now_ms=NOW)  # loaded
    settled = _commands(engine, [("a", tokens["a"], 0), ("b", tokens["b"], None)])
    assert (settled["hlen"], settled["hset"], settled["pexpire"]) == (1, 1, 1), settled
    hmgets = settled["hmget"]
    refused = _commands(engine, [("a", tokens["a"], 0), ("c", tokens["c"] + 1, 0)])
    assert refused["hmget"] == hmgets + 1 and "hset" not in refused, refused
    assert "pexpire" not in refused and "hlen" not in refused, refused
    engine.client.close()
