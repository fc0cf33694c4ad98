"""Round-robin among groups (claim.lua, lib.lua group_index), on the Redis clock given as
``now_ms``: one job per group's turn, the queue's order (priority, then due time) inside a
group, jobs without a group a group of their own, a queue without groups unchanged."""

from __future__ import annotations

from django_delayq.engine import Engine, NewJob

NOW = 1_700_000_000_000


def claim_ids(engine: Engine, n: int, now: int = NOW) -> list[str]:
    return [j.id for j in engine.claim("q", n, 60_000, now_ms=now).jobs]


def one_by_one(engine: Engine, n: int, now: int = NOW) -> list[str]:
    return [i for _ in range(n) for i in claim_ids(engine, 1, now)]


def test_groups_take_turns_whatever_their_backlog(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="h%02d" % i, at_ms=NOW - 1000 + i, group="heavy")
                         for i in range(50)], now_ms=NOW)
    engine.enqueue("q", [NewJob(id="%s%d" % (g, i), at_ms=NOW, group=g)
                         for g in "ab" for i in range(2)], now_ms=NOW)
    assert one_by_one(engine, 7) == ["h00", "a0", "b0", "h01", "a1", "b1", "h02"]
    assert claim_ids(engine, 3) == ["h03", "h04", "h05"]  # alone: its order


def test_a_batch_takes_each_group_s_equal_share(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="h%d" % i, at_ms=NOW - 100 + i, group="heavy")
                         for i in range(20)], now_ms=NOW)
    engine.enqueue("q", [NewJob(id="l%d" % i, at_ms=NOW, group="l%d" % i) for i in range(3)],
                   now_ms=NOW)
    # the groups' equal shares (the light ones have one job each), in each group's order
    assert sorted(claim_ids(engine, 8)) == ["h0", "h1", "h2", "h3", "h4", "l0", "l1", "l2"]
    assert claim_ids(engine, 2) == ["h5", "h6"]


def test_inside_a_group_priority_then_due_time(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="early", at_ms=NOW - 50, group="g"),
                         NewJob(id="late", at_ms=NOW - 10, group="g"),
                         NewJob(id="urgent", at_ms=NOW - 5, priority=5, group="g")], now_ms=NOW)
    assert one_by_one(engine, 3) == ["urgent", "early", "late"]


def test_jobs_without_a_group_are_a_group_of_their_own(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="g%d" % i, at_ms=NOW - 100, group="g") for i in range(3)],
                   now_ms=NOW)
    engine.enqueue("q", [NewJob(id="n%d" % i, at_ms=NOW) for i in range(3)], now_ms=NOW)
    assert one_by_one(engine, 6) == ["g0", "n0", "g1", "n1", "g2", "n2"]


def test_jobs_due_before_the_first_group_are_still_claimed(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="old%02d" % i, at_ms=NOW - 100) for i in range(30)],
                   now_ms=NOW)
    engine.enqueue("q", [NewJob(id="g%d" % i, at_ms=NOW, group="g") for i in range(2)],
                   now_ms=NOW)
    got = one_by_one(engine, 32)
    assert sorted(got) == sorted(["old%02d" % i for i in range(30)] + ["g0", "g1"])
    assert got.index("g1") < 10  # the group is not behind the old backlog


def test_due_jobs_promoted_from_pending_join_their_group(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="h%d" % i, at_ms=NOW + 1000, group="heavy")
                         for i in range(5)], now_ms=NOW)
    engine.enqueue("q", [NewJob(id="l0", at_ms=NOW + 2000, group="light")], now_ms=NOW)
    assert claim_ids(engine, 10) == []
    assert one_by_one(engine, 3, NOW + 3000) == ["h0", "l0", "h1"]


def test_a_cancelled_or_released_job_keeps_the_index_right(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW, group="g") for i in ("a", "b", "c")],
                   now_ms=NOW)
    engine.cancel("q", "a")
    [b] = engine.claim("q", 1, 60_000, now_ms=NOW).jobs
    assert b.id == "b"
    engine.release("q", [b], now_ms=NOW)
    assert one_by_one(engine, 3) == ["b", "c"]
    k = engine.keys("q")
    assert engine.client.zcard(k.group_ready) == 0 and engine.client.zcard(k.group_turns) == 0


def test_a_queue_without_groups_keeps_no_index(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="n%d" % i, at_ms=NOW - i) for i in range(5)], now_ms=NOW)
    assert claim_ids(engine, 5) == ["n4", "n3", "n2", "n1", "n0"]
    k = engine.keys("q")
    assert not engine.client.exists(k.group, k.group_ready, k.group_turns)


def test_a_planted_endless_turn_does_not_freeze_the_rotation(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="%s%02d" % (g, i), at_ms=NOW, group=g)
                         for g in "abcd" for i in range(10)], now_ms=NOW)
    k = engine.keys("q")
    engine.client.zadd(k.group_turns, {"~planted": float("inf"), "~low": float("-inf")})
    # a turn counted on from +inf would stay +inf: the rotation the alphabet, a and b
    # served at every claim of two and c and d never
    served = [i[0] for _ in range(4) for i in claim_ids(engine, 2)]
    assert served.count("c") == served.count("d") == 2
