"""Sharded queues (engine/shard_map.py, engine/sharded.py): a queue of N shards keeps N full
data sets under N hash tags; jobs go to the shard of their id, claims take from every
shard in turn, look-ups by id find the job wherever it is, and whole-queue operations
cover every shard. Every Redis target, the cluster included."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis.exceptions import ResponseError

from django_delayq.engine import (
    CancelOutcome,
    Engine,
    NackOutcome,
    NewJob,
    ShardedEngine,
    ShardLimitError,
)
from django_delayq.engine.engine import MoveOutcome
from django_delayq.engine.shard_health import ShardDown, ShardHealth
from django_delayq.engine.shard_map import shard_index, shard_name
from tests.conftest import unique_prefix

NOW = 1_800_000_000_000
LEASE = 30_000


@pytest.fixture
def make(redis_target: Callable[..., Any]) -> Iterator[Callable[[int], ShardedEngine]]:
    """Engines of one prefix, each with its own shard count of queue ``hot``."""
    client = redis_target()
    prefix = unique_prefix()
    yield lambda shards: Engine(client, prefix=prefix, shards={"hot": shards})
    client.close()


def _ids_by_shard(count: int, per_shard: int) -> list[list[str]]:
    """Job ids grouped by their home shard among ``count``."""
    groups: list[list[str]] = [[] for _ in range(count)]
    n = 0
    while min(len(g) for g in groups) < per_shard:
        job_id = "job-%d" % n
        n += 1
        group = groups[shard_index(job_id, count)]
        if len(group) < per_shard:
            group.append(job_id)
    return groups


def _in_shard(engine: ShardedEngine, index: int) -> set[str]:
    k = engine.keys(shard_name("hot", index))
    raw = [*engine.client.zrange(k.pending, 0, -1), *engine.client.zrange(k.ready, 0, -1)]
    return {v.decode() if isinstance(v, bytes) else v for v in raw}


def test_jobs_spread_over_the_shards_by_id(make: Callable[[int], ShardedEngine]) -> None:
    engine = make(3)
    ids = ["j%d" % i for i in range(300)]
    assert engine.enqueue("hot", [NewJob(id=i, at_ms=NOW) for i in ids], now_ms=NOW) == 300
    for index in range(3):
        held = _in_shard(engine, index)
        assert held == {i for i in ids if shard_index(i, 3) == index}
        assert 50 < len(held) < 150  # crc32 spreads them
    stats = engine.stats("hot", now_ms=NOW)
    assert (stats.ready, stats.scheduled, stats.inflight) == (300, 0, 0)
    assert engine.client.get(engine.keys("hot").shards) in (b"3", "3")


def test_claim_takes_from_every_shard_in_turn(make: Callable[[int], ShardedEngine]) -> None:
    engine = make(3)
    groups = _ids_by_shard(3, 2)
    engine.enqueue("hot", [NewJob(id=i, at_ms=NOW) for g in groups for i in g], now_ms=NOW)
    first = [engine.claim("hot", 1, LEASE, now_ms=NOW).jobs[0].id for _ in range(3)]
    assert sorted(shard_index(i, 3) for i in first) == [0, 1, 2]  # one from each shard
    rest = engine.claim("hot", 10, LEASE, now_ms=NOW)  # fills from the next shards
    assert sorted(j.id for j in rest.jobs) == sorted(set(sum(groups, [])) - set(first))
    assert {j.queue for j in rest.jobs} == {"hot"}  # the logical queue name
    empty = engine.claim("hot", 10, LEASE, now_ms=NOW)
    assert (empty.jobs, empty.next_due_ms) == ([], None)


def test_claim_reports_the_earliest_due_time_of_all_shards(
        make: Callable[[int], ShardedEngine]) -> None:
    engine = make(3)
    groups = _ids_by_shard(3, 1)
    engine.enqueue("hot", [NewJob(id=groups[i][0], at_ms=NOW + 1000 * (3 - i))
                           for i in range(3)], now_ms=NOW)
    result = engine.claim("hot", 10, LEASE, now_ms=NOW)
    assert (result.jobs, result.next_due_ms) == ([], NOW + 1000)  # shard 2's job
    due = engine.claim("hot", 10, LEASE, now_ms=NOW + 2500)
    assert sorted(j.id for j in due.jobs) == sorted([groups[2][0], groups[1][0]])
    assert due.next_due_ms == NOW + 3000


def test_settling_and_lookups_find_the_shard_of_the_job(
        make: Callable[[int], ShardedEngine]) -> None:
    engine = make(3)
    a, b, c, d = (g[0] for g in _ids_by_shard(4, 1))  # ids of assorted homes among 3
    engine.enqueue("hot", [NewJob(id=i, at_ms=NOW) for i in (a, b, c)], now_ms=NOW)
    engine.enqueue("hot", [NewJob(id=d, at_ms=NOW + 60_000)], now_ms=NOW)
    jobs = {j.id: j for j in engine.claim("hot", 3, LEASE, now_ms=NOW).jobs}
    assert engine.extend("hot", [(a, jobs[a].token), (b, jobs[b].token)], LEASE,
                         now_ms=NOW) == [True, True]
    assert engine.ack("hot", [(a, jobs[a].token), (b, jobs[b].token + 1)]) == [True, False]
    assert engine.nack("hot", [(c, jobs[c].token, None)], now_ms=NOW) == [NackOutcome.DEAD]
    assert engine.inspect("hot", c).place == "dead"
    assert engine.requeue("hot", c, now_ms=NOW)[0] == MoveOutcome.MOVED
    assert engine.reschedule("hot", d, delay_ms=0, now_ms=NOW)[0] == MoveOutcome.MOVED
    assert engine.inspect("hot", d).score_ms == NOW
    assert engine.cancel("hot", d) == CancelOutcome.CANCELLED
    assert engine.cancel("hot", "nowhere") == CancelOutcome.NOT_FOUND
    assert engine.release("hot", [jobs[b]], now_ms=NOW) == [True]
    assert [p.queued for p in engine.presence("hot", [b, c, "nowhere"])] == [True, True, False]


def test_stats_pause_and_purge_cover_every_shard(make: Callable[[int], ShardedEngine]) -> None:
    engine = make(3)
    engine.enqueue("hot", [NewJob(id="p%d" % i, at_ms=NOW - 10) for i in range(30)] +
                   [NewJob(id="s%d" % i, at_ms=NOW + 10) for i in range(30)], now_ms=NOW)
    stats = engine.stats("hot", now_ms=NOW)
    assert (stats.ready, stats.scheduled, stats.next_due_ms) == (30, 30, NOW + 10)
    assert engine.pause("hot") is True
    assert engine.paused(["hot", "cold"]) == ["hot"]
    assert all(engine.client.exists(engine.keys(shard_name("hot", i)).paused)
               for i in range(3))
    claimed = engine.claim("hot", 10, LEASE, now_ms=NOW)
    assert (claimed.jobs, claimed.paused) == ([], True)
    assert engine.resume("hot") is True
    assert engine.paused(["hot"]) == []
    purged: list[str] = []
    while ids := engine.purge_pending("hot"):
        purged += ids
    assert len(purged) == 60
    engine.enqueue("hot", [NewJob(id="x%d" % i, at_ms=NOW) for i in range(9)], now_ms=NOW)
    engine.purge("hot")
    assert not engine.holds_data("hot")
    assert engine.stats("hot", now_ms=NOW).ready == 0


def test_a_sharded_queue_refuses_a_queue_limit(make: Callable[[int], ShardedEngine]) -> None:
    engine = make(2)
    with pytest.raises(ShardLimitError, match="'hot' has 2 shards"):
        engine.set_queue_limit("hot", rate=(10, 1000), concurrency=None)
    engine.set_queue_limit("hot", rate=None, concurrency=None)  # lifting is fine


def test_more_shards_keep_the_jobs_enqueued_before(make: Callable[[int], ShardedEngine]) -> None:
    """Growing 1 -> 3: the jobs stay in shard 0 (the queue itself); claims drain them and
    every look-up by id still finds them."""
    ids = ["old%d" % i for i in range(30)]
    make(1).enqueue("hot", [NewJob(id=i, at_ms=NOW) for i in ids], now_ms=NOW)
    engine = make(3)
    assert engine.inspect("hot", ids[1]).place == "pending"
    assert engine.cancel("hot", ids[0]) == CancelOutcome.CANCELLED
    jobs = engine.claim("hot", 100, LEASE, now_ms=NOW).jobs
    assert sorted(j.id for j in jobs) == sorted(ids[1:])
    assert engine.ack("hot", [(j.id, j.token) for j in jobs]) == [True] * 29
    assert engine.stats("hot", now_ms=NOW).inflight == 0


def test_fewer_shards_drain_the_retired_ones(make: Callable[[int], ShardedEngine]) -> None:
    """Shrinking 3 -> 1: the record keeps the span at 3, so claims still drain shards 1
    and 2 while new jobs go to shard 0 only."""
    ids = ["n%d" % i for i in range(30)]
    make(3).enqueue("hot", [NewJob(id=i, at_ms=NOW) for i in ids], now_ms=NOW)
    engine = make(1)
    engine.enqueue("hot", [NewJob(id="late", at_ms=NOW)], now_ms=NOW)
    assert "late" in _in_shard(engine, 0)
    assert engine.stats("hot", now_ms=NOW).ready == 31
    claimed: list[str] = []
    while jobs := engine.claim("hot", 7, LEASE, now_ms=NOW).jobs:
        claimed += [j.id for j in jobs]
        assert engine.ack("hot", [(j.id, j.token) for j in jobs]) == [True] * len(jobs)
    assert sorted(claimed) == sorted([*ids, "late"])


def test_expired_leases_of_every_shard_are_recovered(
        make: Callable[[int], ShardedEngine]) -> None:
    engine = make(3)
    ids = ["r%d" % i for i in range(12)]
    engine.enqueue("hot", [NewJob(id=i, at_ms=NOW) for i in ids], now_ms=NOW)
    assert len(engine.claim("hot", 20, 1000, now_ms=NOW).jobs) == 12
    assert len(engine.expiring("hot", within_ms=10**12)) == 12
    found = engine.recover("hot", now_ms=NOW + 5000)
    assert sorted(r.id for r in found) == sorted(ids)
    assert engine.stats("hot", now_ms=NOW + 5000).ready == 12


def test_the_wake_listener_hears_every_shard(make: Callable[[int], ShardedEngine]) -> None:
    engine = make(3)
    groups = _ids_by_shard(3, 1)
    event = threading.Event()
    listener = engine.wake_listener(["hot"], event)
    assert len(listener.channels) == 3 and set(listener.channels.values()) == {"hot"}
    listener.start()
    try:
        assert event.wait(30)  # subscribed
        listener.take()
        for index, [job_id] in enumerate(groups):
            event.clear()
            engine.enqueue("hot", [NewJob(id=job_id, at_ms=NOW - 1000 * index)], now_ms=NOW)
            assert event.wait(30), "no wake-up from shard %d" % index
            assert listener.take() == {"hot": NOW - 1000 * index}
    finally:
        listener.stop()


def test_the_span_survives_the_loss_of_shard_zero(make: Callable[[int], ShardedEngine]) -> None:
    """Shrinking 3 -> 1, then shard 0's node loses its data (its record with it): the
    record kept in the other shards' slots keeps the span at 3, so the jobs of the
    retired shards are still claimed, and shard 0's record is written again."""
    ids = ["m%d" % i for i in range(30)]
    make(3).enqueue("hot", [NewJob(id=i, at_ms=NOW) for i in ids], now_ms=NOW)
    engine = make(1)
    record = engine.keys(shard_name("hot", 0)).shards
    assert engine.client.delete(record) == 1  # shard 0's slot lost its data
    retired = _in_shard(engine, 1) | _in_shard(engine, 2)
    assert retired
    claimed: list[str] = []
    while jobs := engine.claim("hot", 7, LEASE, now_ms=NOW).jobs:
        claimed += [j.id for j in jobs]
    assert retired <= set(claimed)
    assert int(engine.client.get(record)) == 3


def test_reads_of_the_whole_queue_leave_out_a_shard_set_aside(
        make: Callable[[int], ShardedEngine]) -> None:
    """A shard whose node failed moments ago (``ShardHealth`` sets it aside) is left out
    of the reads ``delayq_status`` and the metrics do; the others answer. No shard
    answering raises."""
    engine = make(3)
    ids = _ids_by_shard(3, 2)
    engine.enqueue("hot", [NewJob(id=job_id, at_ms=NOW - 100 * (i + 1))
                           for i, job_id in enumerate(j for group in ids for j in group)],
                   now_ms=NOW)
    engine.pause("hot")
    engine.pause_group("hot", "g")
    engine.health = ShardHealth(clock=lambda: 0.0)  # a shard set aside stays aside
    oldest = engine.oldest_pending("hot")
    assert oldest is not None and oldest[0] == ids[2][1]  # the earliest due of all
    for i in (2, 0):  # shard 0: the span record, the limit, the groups ask the next shard
        engine.health.failed(shard_name("hot", i), ConnectionError("node down"))
        assert engine.stats("hot", now_ms=NOW).ready == 2 * (3 - (1 if i == 2 else 2))
        assert engine.paused(["hot"]) == ["hot"]
        assert engine.queue_limit("hot") is None and engine.paused_groups("hot") == ["g"]
        assert engine.held_groups("hot") == {}
        head = engine.oldest_pending("hot")
        assert head is not None and head[0] == ids[1][1]  # shard 2's left out
    engine.health.failed(shard_name("hot", 1), ConnectionError("node down"))
    with pytest.raises(ShardDown, match="unavailable"):
        engine.paused(["hot"])


def test_reads_of_the_whole_queue_raise_an_error_a_shard_answers(
        make: Callable[[int], ShardedEngine]) -> None:
    """Only a shard whose node does not answer is left out of those reads: an error a
    shard answers (WRONGTYPE here) is raised, not taken for a node loss."""
    engine = make(3)
    engine.enqueue("hot", [NewJob(id="j", at_ms=NOW)], now_ms=NOW)
    engine.client.set(engine.keys(shard_name("hot", 0)).limit, "not a hash")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        engine.queue_limit("hot")


def test_a_queue_of_one_shard_enqueues_on_the_queue_itself(
        make: Callable[[int], ShardedEngine]) -> None:
    """One shard (``schedule()``'s send): the jobs go to the queue's own keys in one call,
    an id the scripts refuse raises ``ValueError`` before anything is sent, an empty list
    sends nothing (even while the node is set aside), and a node set aside after failing
    refuses the call at once (``ShardDown``), as on a queue of many shards."""
    engine = make(1)
    assert engine.enqueue("hot", [NewJob(id="a", at_ms=NOW), NewJob(id="b", at_ms=NOW + 1),
                                  NewJob(id="a", at_ms=NOW)], now_ms=NOW) == 2
    assert _in_shard(engine, 0) == {"a", "b"}
    with pytest.raises(ValueError, match="control characters"):
        engine.enqueue("hot", [NewJob(id="c", at_ms=NOW), NewJob(id="d\n", at_ms=NOW)])
    assert _in_shard(engine, 0) == {"a", "b"}
    engine.health = ShardHealth(clock=lambda: 0.0)  # a shard set aside stays aside
    engine.health.failed("hot", ConnectionError("node down"))
    assert engine.enqueue("hot", []) == 0
    with pytest.raises(ShardDown, match="unavailable"):
        engine.enqueue("hot", [NewJob(id="e", at_ms=NOW)], now_ms=NOW)
    assert _in_shard(engine, 0) == {"a", "b"}
