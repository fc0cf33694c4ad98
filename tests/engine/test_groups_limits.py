"""Group limits inside claim.lua (lua/lib.lua ``group_limits``, ``group_slots``), on the
Redis clock given as ``now_ms``: a group at its concurrency or out of its rate is held
out of the rotation while the other groups are served; every script that takes a job
out of flight frees its slot; an override beats the queue's defaults. Invariant 9 of
docs/internals.md: a job of a group holds one slot from its claim until it leaves flight,
and no claim leases beyond a group's concurrency or rate."""

from __future__ import annotations

from django_delayq.engine import Engine, NewJob
from django_delayq.engine.outcomes import QueueLimit

NOW = 1_700_000_000_000
LEASE = 60_000


def enqueue(engine: Engine, group: str, n: int, prefix: str = "") -> None:
    engine.enqueue("q", [NewJob(id="%s%s%02d" % (prefix, group, i), at_ms=NOW - 100 + i,
                                group=group) for i in range(n)], now_ms=NOW)


def claim(engine: Engine, n: int, now: int = NOW) -> list[str]:
    return [j.id for j in engine.claim("q", n, LEASE, now_ms=now).jobs]


def by_group(ids: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in ids:
        out[i[0]] = out.get(i[0], 0) + 1
    return out


def leases(engine: Engine, n: int, now: int = NOW) -> list[tuple[str, int]]:
    return [(j.id, j.token) for j in engine.claim("q", n, LEASE, now_ms=now).jobs]


def test_a_group_at_its_concurrency_is_skipped_and_the_others_are_served(
        engine: Engine) -> None:
    engine.set_queue_limit("q", rate=None, concurrency=None,
                           groups=QueueLimit(concurrency=2))
    enqueue(engine, "a", 20)
    enqueue(engine, "b", 20)
    assert by_group(claim(engine, 10)) == {"a": 2, "b": 2}
    got = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert got.jobs == [] and got.limited
    assert engine.group_slots("q") == {"a": 2, "b": 2}
    assert set(engine.held_groups("q")) == {"a", "b"}
    enqueue(engine, "c", 5)  # a group with room is served at once, however many are held
    assert by_group(claim(engine, 10)) == {"c": 2}


def test_an_ack_frees_the_slot_and_puts_the_held_group_back(engine: Engine) -> None:
    engine.set_queue_limit("q", rate=None, concurrency=None,
                           groups=QueueLimit(concurrency=1))
    enqueue(engine, "a", 3)
    first = leases(engine, 5)
    assert [i for i, _ in first] == ["a00"]
    assert claim(engine, 5) == []
    assert engine.ack("q", first) == [True]
    assert engine.group_slots("q") == {}
    assert engine.held_groups("q") == {}
    assert claim(engine, 5) == ["a01"]


def test_every_way_out_of_flight_frees_the_slot(engine: Engine) -> None:
    engine.set_queue_limit("q", rate=None, concurrency=None,
                           groups=QueueLimit(concurrency=10))
    enqueue(engine, "a", 10)
    claimed = engine.claim("q", 10, LEASE, now_ms=NOW).jobs
    assert engine.group_slots("q") == {"a": 10}
    pairs = [(j.id, j.token) for j in claimed]
    assert engine.ack("q", pairs[:2]) == [True, True]
    assert len(engine.nack("q", [(i, t, 0) for i, t in pairs[2:4]], now_ms=NOW)) == 2
    assert engine.release("q", claimed[4:6], now_ms=NOW) == [True, True]
    assert engine.defer("q", [(i, t, NOW + 10) for i, t in pairs[6:8]], now_ms=NOW) == [
        True, True]
    assert engine.group_slots("q") == {"a": 2}
    assert len(engine.recover("q", now_ms=NOW + LEASE + 1)) == 2  # a dead worker's leases
    assert engine.group_slots("q") == {}


def test_a_group_rate_counts_claims_in_its_window(engine: Engine) -> None:
    engine.set_queue_limit("q", rate=None, concurrency=None,
                           groups=QueueLimit(rate=(3, 1000)))
    enqueue(engine, "a", 10)
    enqueue(engine, "b", 10)
    assert by_group(claim(engine, 4)) == {"a": 2, "b": 2}
    assert by_group(claim(engine, 4)) == {"a": 1, "b": 1}
    got = engine.claim("q", 4, LEASE, now_ms=NOW + 500)
    assert got.jobs == [] and got.limited
    assert got.next_due_ms == NOW + 1000  # when the first claims leave the window
    assert claim(engine, 4, NOW + 999) == []
    assert by_group(claim(engine, 10, NOW + 1000)) == {"a": 3, "b": 3}


def test_an_override_beats_the_default_for_its_group_only(engine: Engine) -> None:
    engine.set_queue_limit("q", rate=None, concurrency=None,
                           groups=QueueLimit(concurrency=1))
    assert engine.set_group_limit("q", "a", rate=None, concurrency=3)
    assert not engine.set_group_limit("q", "a", rate=None, concurrency=3)
    enqueue(engine, "a", 10)
    enqueue(engine, "b", 10)
    assert by_group(claim(engine, 20)) == {"a": 3, "b": 1}
    assert engine.group_limit_overrides("q") == {"a": "-1 -1 3"}
    assert engine.clear_group_limit("q", "a")
    assert engine.group_limit_overrides("q") == {}


def test_raising_an_override_puts_a_held_group_back_at_once(engine: Engine) -> None:
    enqueue(engine, "a", 5)
    engine.set_group_limit("q", "a", rate=None, concurrency=1)
    assert claim(engine, 5) == ["a00"]
    assert claim(engine, 5) == []
    assert "a" in engine.held_groups("q")
    engine.set_group_limit("q", "a", rate=None, concurrency=3)
    assert claim(engine, 5) == ["a01", "a02"]


def test_jobs_without_a_group_have_no_group_limit(engine: Engine) -> None:
    engine.set_queue_limit("q", rate=None, concurrency=None,
                           groups=QueueLimit(concurrency=1))
    enqueue(engine, "a", 3)
    engine.enqueue("q", [NewJob(id="n%d" % i, at_ms=NOW) for i in range(3)], now_ms=NOW)
    assert sorted(claim(engine, 10)) == ["a00", "n0", "n1", "n2"]


def test_a_slot_whose_job_left_flight_unseen_is_repaired(engine: Engine) -> None:
    engine.set_queue_limit("q", rate=None, concurrency=None,
                           groups=QueueLimit(concurrency=1))
    enqueue(engine, "a", 3)
    [job] = engine.claim("q", 1, LEASE, now_ms=NOW).jobs
    k = engine.keys("q")
    engine.client.hdel(k.group, job.id)  # by hand: the ack cannot find its slot
    assert engine.ack("q", [(job.id, job.token)]) == [True]
    assert engine.group_slots("q") == {"a": 1}
    assert claim(engine, 5) == ["a01"]  # the claim checked the slot against inflight


def test_planted_slots_are_repaired_claim_after_claim_not_a_lease_apart(
        engine: Engine) -> None:
    engine.set_queue_limit("q", rate=None, concurrency=None,
                           groups=QueueLimit(concurrency=3))
    engine.enqueue("q", [NewJob(id="b%02d" % i, at_ms=NOW - 1000, group="b")
                         for i in range(30)], now_ms=NOW)  # first in ready: a's are not
    enqueue(engine, "a", 3)                              # indexed again at every claim
    engine.client.zadd(engine.keys("q").group_running,  # a hostile writer's slots
                       {"a\nplanted%03d" % i: 0 for i in range(250)})
    got = [claim(engine, 5, NOW + i) for i in range(4)]  # each drops at most 100
    assert "a00" in got[3] or "a00" in got[2]  # not a lease later (250 slots: 3 claims)
    assert engine.group_slots("q")["a"] <= 3


def test_a_window_stuffed_by_hand_costs_no_walk_through_it(engine: Engine) -> None:
    engine.set_queue_limit("q", rate=None, concurrency=None,
                           groups=QueueLimit(rate=(5, 1000)))
    enqueue(engine, "a", 3)
    engine.client.zadd(engine.keys("q").group_starts,  # 2,000 claims no claim made
                       {"a\n%016d%04d:1" % (NOW - 500, i): 0 for i in range(2000)})
    got = engine.claim("q", 5, LEASE, now_ms=NOW)
    assert got.jobs == [] and got.limited
    # the entry that would let a claim in is not looked for 1,995 entries deep (a walk as
    # long as what was planted): the group is held for one window
    assert engine.held_groups("q", now_ms=NOW) == {"a": NOW + 1000}


def test_a_queue_without_group_limits_counts_slots_only(engine: Engine) -> None:
    enqueue(engine, "a", 30)
    assert len(claim(engine, 25)) == 25
    assert engine.group_slots("q") == {"a": 25}
    assert engine.held_groups("q") == {}


def test_a_held_group_put_back_in_an_empty_rotation_wakes_the_workers(engine: Engine) -> None:
    engine.set_queue_limit("q", rate=None, concurrency=None,
                           groups=QueueLimit(concurrency=1))
    enqueue(engine, "a", 2)
    first = leases(engine, 5)
    assert claim(engine, 5) == []  # a held, nothing else to claim: workers wait
    listener = engine.client.pubsub()
    listener.subscribe(engine.keys("q").channel)
    assert listener.get_message(timeout=5)["type"] == "subscribe"  # type: ignore[index]
    assert engine.ack("q", first, now_ms=NOW + 5) == [True]
    told = listener.get_message(timeout=5)
    listener.close()
    assert told is not None and int(told["data"]) == NOW + 5
    assert claim(engine, 5, NOW + 5) == ["a01"]
