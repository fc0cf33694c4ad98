"""The urgent index (docs/internals.md, "Priorities, pause and limits in Redis"): a due job
of priority above 0 is promoted by the first claim after it is due, ahead of a backlog of
pending due before it that needs many claims to promote; jobs of one priority still leave
in due order; the index never outlives its jobs. Every Redis target (``engine`` runs on
each binary and on the cluster)."""

from __future__ import annotations

from django_delayq.engine import Engine, scripts
from tests.engine.test_priority import NOW, claim_ids, new


def backlog(engine: Engine, n: int = 4 * scripts.MAX_PROMOTE) -> int:
    """n jobs of priority 0 in pending, due NOW .. NOW + n - 1 (enqueued ahead: not due)."""
    engine.enqueue("q", [new("b%05d" % i, NOW + i) for i in range(n)], now_ms=NOW - 1)
    return n


def indexed(engine: Engine) -> list[str]:
    return [m.decode() for m in engine.client.zrange(engine.keys("q").urgent, 0, -1)]


def test_a_due_priority_job_is_claimed_ahead_of_a_backlog_in_one_claim(engine: Engine) -> None:
    n = backlog(engine)
    engine.enqueue("q", [new("timed", NOW + n, 10)], now_ms=NOW - 1)
    assert indexed(engine) == ["timed"]
    assert claim_ids(engine, 1, NOW + n) == ["timed"]  # 4 promotions of backlog before it
    assert indexed(engine) == []
    rest: list[str] = []
    while batch := claim_ids(engine, 200, NOW + n):
        rest += batch
    assert rest == ["b%05d" % i for i in range(n)]  # the backlog keeps its due order


def test_jobs_of_one_priority_leave_in_due_order_through_either_door(engine: Engine) -> None:
    """More due priority jobs than one claim's URGENT read, some among the backlog's
    promotion (cand) and some behind it: claimed strictly in due order."""
    n = backlog(engine)
    k = 2 * scripts.MAX_URGENT  # spread over the backlog's due times: all due at `now`
    vips = [new("v%03d" % i, NOW + n * i // k, 5) for i in range(k)]
    engine.enqueue("q", vips, now_ms=NOW - 1)
    now = NOW + n
    claimed: list[str] = []
    while batch := claim_ids(engine, 3, now):
        claimed += batch
    vip_order = [i for i in claimed if i.startswith("v")]
    assert vip_order == [v.id for v in vips]
    assert claimed[:len(vips)] == vip_order  # every one ahead of the priority 0 backlog
    assert indexed(engine) == []


def test_a_not_yet_due_priority_job_waits_for_its_time(engine: Engine) -> None:
    n = backlog(engine)
    engine.enqueue("q", [new("later", NOW + 10 * n, 9)], now_ms=NOW - 1)
    assert "later" not in claim_ids(engine, 200, NOW + n)
    assert indexed(engine) == ["later"]
    assert claim_ids(engine, 1, NOW + 10 * n) == ["later"]


def test_priority_0_and_below_are_not_indexed(engine: Engine) -> None:
    engine.enqueue("q", [new("zero", NOW + 5), new("low", NOW + 6, -3), new("hi", NOW + 7, 1)],
                   now_ms=NOW)
    assert indexed(engine) == ["hi"]


def test_the_index_follows_cancel_reschedule_and_purge(engine: Engine) -> None:
    engine.enqueue("q", [new("c", NOW + 50, 3), new("r", NOW + 60, 3), new("p", NOW + 70, 3)],
                   now_ms=NOW)
    engine.cancel("q", "c")
    assert indexed(engine) == ["r", "p"]
    engine.reschedule("q", "r", at_ms=NOW + 500, now_ms=NOW)
    assert engine.client.zscore(engine.keys("q").urgent, "r") == NOW + 500
    engine.purge_pending("q")
    assert indexed(engine) == []


def test_a_stale_index_entry_is_dropped_when_read(engine: Engine) -> None:
    """An entry whose job is no longer in pending (planted: no script leaves one but a
    crash between two of ours could) is dropped by the claim that reads it; nothing runs."""
    k = engine.keys("q")
    engine.client.zadd(k.urgent, {"ghost": NOW - 5})
    engine.enqueue("q", [new("real", NOW - 1)], now_ms=NOW)
    assert claim_ids(engine, 10, NOW) == ["real"]
    assert indexed(engine) == []
