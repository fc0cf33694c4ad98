"""ack.lua's key types: its reads type the keys they meet, one EXISTS the keys a plain
queue never has, TYPE the rest; a key of the wrong type is moved aside before any write
and the ack goes through (real Redis)."""

from __future__ import annotations

import pytest
import redis

from django_delayq.engine import Engine, NewJob, scripts
from tests.conftest import unique_prefix

NOW = 1_800_000_000_000
LEASE = 30_000
ACK_TYPED = [k.name for k in scripts.load("ack").keys if k.kind]


def _claimed(engine: Engine, *ids: str, priority: int = 0, group: str = "") -> list:
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW - 10, priority=priority, group=group,
                         envelope="{}")
                         for i in ids], now_ms=NOW)
    jobs = engine.claim("q", 10, LEASE, now_ms=NOW).jobs
    engine.mark_started(jobs)
    return jobs


@pytest.mark.parametrize("holder", ["w", ""])
@pytest.mark.parametrize("name", ACK_TYPED)
def test_a_key_of_the_wrong_type_is_moved_aside_before_any_write(
        engine: Engine, name: str, holder: str) -> None:
    k = engine.keys("q")
    jobs = _claimed(engine, "a", "b")
    key = getattr(k, name)
    engine.client.delete(key)
    engine.client.set(key, "planted")
    others = {n.name: getattr(k, n.name) for n in scripts.load("ack").keys if n.name != name}
    before = {n: engine.client.dump(key) for n, key in others.items()}
    seen: list[dict[str, bytes | None]] = []
    original = scripts.move_aside

    def moving(client: object, *args: str) -> None:  # what the script wrote before it ended
        seen.append({n: engine.client.dump(key) for n, key in others.items()})
        original(client, *args)

    scripts.move_aside = moving
    try:
        acked = engine.ack("q", [(j.id, j.token) for j in jobs], holder=holder, now_ms=NOW)
    finally:
        scripts.move_aside = original
    if holder == "" and name in ("settled", "settled_by"):  # no record: never written
        assert seen == [] and engine.client.get(key) == b"planted"
    else:
        assert seen == [before], name  # noticed, before the script's first write
        assert engine.client.type(key) != b"string"  # moved aside
    if name in ("inflight", "attempts"):  # the leases went with the key: refused
        assert acked == [False, False]
        return
    assert acked == [True, True]
    assert engine.client.zcard(k.inflight) == 0
    assert engine.client.hlen(k.attempts) == 0 and engine.client.hlen(k.runs) == 0


def test_an_ack_in_a_queue_with_priorities_and_groups_forgets_them(engine: Engine) -> None:
    k = engine.keys("q")
    jobs = _claimed(engine, "a", priority=5, group="g") + _claimed(engine, "b")
    assert engine.client.hexists(k.prio, "a") and engine.client.hexists(k.group, "a")
    assert engine.client.zcard(k.group_running) == 1
    assert engine.ack("q", [(j.id, j.token) for j in jobs], holder="w",
                      now_ms=NOW) == [True, True]
    for key in (k.prio, k.group, k.group_running, k.jobs, k.attempts, k.runs, k.inflight):
        assert engine.client.exists(key) == 0, key
    assert engine.client.zcard(k.settled) == 2


def _ack_commands(engine: Engine, jobs: list) -> dict[str, int]:
    """The commands (by INFO commandstats name) one ack of ``jobs[1:]`` runs inside its
    script, ``jobs[0]``'s ack having loaded it first."""
    engine.ack("q", [(jobs[0].id, jobs[0].token)], holder="w", now_ms=NOW)  # loaded
    engine.client.config_resetstat()
    assert engine.ack("q", [(j.id, j.token) for j in jobs[1:]], holder="w") == [True, True]
    stats = engine.client.info("commandstats")
    return {name: s["calls"] for name, s in stats.items()
            if name not in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_config|resetstat",
                            "cmdstat_config")}  # 6.2 names no subcommand


def test_a_plain_ack_runs_fourteen_commands(any_redis_server) -> None:  # type: ignore[no-untyped-def]
    # one server (INFO commandstats of one node), each redis-server binary
    engine = Engine(redis.Redis.from_url(any_redis_server.url), prefix=unique_prefix())
    inner = _ack_commands(engine, _claimed(engine, "a", "b", "c"))
    assert sum(inner.values()) == 14, inner
    assert "cmdstat_srem" not in inner and inner["cmdstat_type"] == 3
    engine.client.close()


def test_a_plain_ack_of_a_django_delayq_job_runs_twelve_commands(any_redis_server) -> None:  # type: ignore[no-untyped-def]
    # no envelope in Redis, no start mark arrived yet: no HDEL of jobs or runs
    engine = Engine(redis.Redis.from_url(any_redis_server.url), prefix=unique_prefix())
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW - 10) for i in "abc"], now_ms=NOW)
    inner = _ack_commands(engine, engine.claim("q", 10, LEASE, now_ms=NOW).jobs)
    assert sum(inner.values()) == 12, inner
    assert inner["cmdstat_hdel"] == 1 and inner["cmdstat_type"] == 3, inner
    k = engine.keys("q")
    assert engine.client.zcard(k.settled) == 3 and engine.client.exists(k.attempts) == 0
    engine.client.close()
