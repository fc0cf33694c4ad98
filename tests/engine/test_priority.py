"""Priorities in Redis (docs/internals.md, "Priorities, pause and limits in Redis"): among
due jobs a higher priority is claimed first, equal priorities in due order, and a job due
later never overtakes an earlier one of the same priority, whatever path brought it back
in line. Every Redis target (``engine`` runs on each binary and on the cluster)."""

from __future__ import annotations

import math

from django_delayq.engine import Engine, NackOutcome, NewJob, scripts
from django_delayq.engine.engine import MoveOutcome

NOW = 1_800_000_000_000
LEASE = 30_000


def new(id_: str, at: int = NOW, priority: int = 0) -> NewJob:
    return NewJob(id=id_, at_ms=at, priority=priority)


def claim_ids(engine: Engine, limit: int = 200, now: int = NOW) -> list[str]:
    return [j.id for j in engine.claim("q", limit, LEASE, now_ms=now).jobs]


def test_higher_priority_due_jobs_are_claimed_first(engine: Engine) -> None:
    engine.enqueue("q", [new("low", NOW - 30, -5), new("mid", NOW - 20), new("top", NOW - 10, 9),
                         new("also_top", NOW - 5, 9), new("future", NOW + 10, 100)], now_ms=NOW)
    assert claim_ids(engine, 1) == ["top"]
    assert claim_ids(engine) == ["also_top", "mid", "low"]
    assert claim_ids(engine, now=NOW + 10) == ["future"]


def test_equal_priority_keeps_due_order_and_reports_the_due_time(engine: Engine) -> None:
    engine.enqueue("q", [new("c", NOW - 1, 3), new("a", NOW - 30, 3), new("b", NOW - 20, 3)],
                   now_ms=NOW)
    jobs = engine.claim("q", 10, LEASE, now_ms=NOW).jobs
    assert [(j.id, j.due_ms) for j in jobs] == [("a", NOW - 30), ("b", NOW - 20),
                                               ("c", NOW - 1)]


def test_candidates_of_ready_and_pending_are_taken_by_score_then_id(engine: Engine) -> None:
    """claim.lua orders the head of ready and the jobs it promotes by score, then id (its
    scores sorted as numbers, the ties by id), whichever set a job was in."""
    engine.enqueue("q", [new(i, NOW, p) for i, p in (("p3", 2), ("p1", 2), ("p5", 0),
                                                     ("p0", -1))], now_ms=NOW - 1)
    engine.enqueue("q", [new("r2", NOW - 5, 2)], now_ms=NOW - 1)  # due: ready at once
    engine.enqueue("q", [new("r4", NOW, 2), new("r6", NOW, 0)], now_ms=NOW)
    k = engine.keys("q")
    assert engine.client.zcard(k.ready) == 3 and engine.client.zcard(k.pending) == 4
    assert claim_ids(engine, 3) == ["r2", "p1", "p3"]
    assert claim_ids(engine, 10) == ["r4", "p5", "r6", "p0"]


def test_a_later_due_job_never_overtakes_an_earlier_one_of_its_priority(engine: Engine) -> None:
    """A backlog of due jobs still in pending (more than one claim promotes): jobs enqueued,
    retried or released due now wait behind it, not in front of it."""
    k = engine.keys("q")
    n = scripts.MAX_PROMOTE + 50
    engine.enqueue("q", [new("old%04d" % i, NOW + i) for i in range(n)], now_ms=NOW)
    later = NOW + 10_000
    engine.enqueue("q", [new("fresh", later)], now_ms=later)  # due: pending holds earlier
    assert engine.client.zscore(k.pending, "fresh") == later
    claimed: list[str] = []
    while batch := claim_ids(engine, 100, later):
        claimed += batch
    assert claimed == ["old%04d" % i for i in range(n)] + ["fresh"]


def test_a_higher_priority_job_of_priority_0_waits_at_most_ceil_n_over_promote_claims(
        engine: Engine) -> None:
    """Not indexed (priority 0 or below): it waits for the promotion of the backlog due
    before it (tests/engine/test_priority_urgent.py: a priority above 0 does not)."""
    n = 2 * scripts.MAX_PROMOTE + 10
    engine.enqueue("q", [new("b%04d" % i, NOW + i, -5) for i in range(n)], now_ms=NOW)
    engine.enqueue("q", [new("urgent", NOW + n, 0)], now_ms=NOW)
    bound = math.ceil((n + 1) / scripts.MAX_PROMOTE)  # n jobs due before it, and itself
    claimed = [claim_ids(engine, 1, NOW + n) for _ in range(bound)]
    assert claimed[-1] == ["urgent"] and ["urgent"] not in claimed[:-1]


def test_a_job_enqueued_due_on_an_idle_queue_is_ready_at_once(engine: Engine) -> None:
    engine.enqueue("q", [new("b%03d" % i, NOW - 1) for i in range(300)], now_ms=NOW)
    engine.enqueue("q", [new("urgent", NOW, 1)], now_ms=NOW)
    assert claim_ids(engine, 1) == ["urgent"]


def test_priority_zero_stores_nothing_and_the_entry_is_forgotten(engine: Engine) -> None:
    k = engine.keys("q")
    engine.enqueue("q", [new("plain"), new("vip", priority=7)], now_ms=NOW)
    assert engine.client.hgetall(k.prio) == {b"vip": b"7"}
    assert engine.inspect("q", "vip").priority == 7
    jobs = engine.claim("q", 10, LEASE, now_ms=NOW).jobs
    assert engine.ack("q", [(j.id, j.token) for j in jobs]) == [True, True]
    assert not engine.client.exists(k.prio)


def test_a_priority_beyond_the_range_counts_as_its_nearest_end(engine: Engine) -> None:
    engine.enqueue("q", [new("hi", NOW - 1, 10**6), new("top", NOW - 2, 100),
                         new("lo", NOW - 3, -10**6)], now_ms=NOW)
    assert [engine.inspect("q", i).priority for i in ("hi", "lo")] == [100, -100]
    assert claim_ids(engine) == ["top", "hi", "lo"]


def _claimed(engine: Engine, id_: str, now: int = NOW):  # type: ignore[no-untyped-def]
    [job] = [j for j in engine.claim("q", 200, LEASE, now_ms=now).jobs if j.id == id_]
    return job


def _with_rivals(engine: Engine, now: int) -> None:
    """Priority-0 jobs due before the one under test."""
    engine.enqueue("q", [new("r%d" % i, now - 100 + i) for i in range(3)], now_ms=now)


def test_priority_survives_a_retry(engine: Engine) -> None:
    engine.enqueue("q", [new("vip", priority=5)], now_ms=NOW)
    vip = _claimed(engine, "vip")
    assert engine.nack("q", [("vip", vip.token, 0)], now_ms=NOW) == [NackOutcome.RETRYING]
    _with_rivals(engine, NOW)
    assert claim_ids(engine, 1) == ["vip"]


def test_priority_survives_a_release_and_a_defer(engine: Engine) -> None:
    engine.enqueue("q", [new("vip", priority=5)], now_ms=NOW)
    vip = _claimed(engine, "vip")
    assert engine.release("q", [vip], now_ms=NOW) == [True]
    _with_rivals(engine, NOW)
    vip = engine.claim("q", 1, LEASE, now_ms=NOW).jobs[0]
    assert (vip.id, vip.attempt, vip.token) == ("vip", 1, 2)  # the attempt given back
    assert engine.defer("q", [("vip", vip.token, NOW + 50)], now_ms=NOW) == [True]
    assert claim_ids(engine, 1, NOW + 50) == ["vip"]


def test_priority_survives_recovery(engine: Engine) -> None:
    engine.enqueue("q", [new("vip", priority=5)], now_ms=NOW)
    engine.mark_started(engine.claim("q", 1, 10, now_ms=NOW).jobs)  # it ran
    _with_rivals(engine, NOW)
    [r] = engine.recover("q", now_ms=NOW + 10)
    assert (r.id, r.outcome) == ("vip", NackOutcome.RETRYING)
    assert claim_ids(engine, 1, NOW + 10) == ["vip"]


def test_priority_survives_reschedule_and_requeue(engine: Engine) -> None:
    engine.enqueue("q", [new("vip", NOW + 10**6, priority=5)], now_ms=NOW)
    _with_rivals(engine, NOW)
    assert engine.reschedule("q", "vip", now_ms=NOW)[0] is MoveOutcome.MOVED
    assert claim_ids(engine, 1) == ["vip"]
    vip = engine.inspect("q", "vip")
    assert (vip.place, vip.attempts) == ("inflight", 1)
    assert engine.nack("q", [("vip", 1, None)], now_ms=NOW) == [NackOutcome.DEAD]
    assert engine.inspect("q", "vip").priority == 5  # kept while dead
    assert engine.requeue("q", "vip", now_ms=NOW)[0] is MoveOutcome.MOVED
    assert claim_ids(engine, 1) == ["vip"]


def test_a_ready_job_can_be_rescheduled_cancelled_and_inspected(engine: Engine) -> None:
    k = engine.keys("q")
    engine.enqueue("q", [new("a", NOW - 5, 2), new("b", NOW - 5)], now_ms=NOW)
    assert engine.client.zcard(k.ready) == 2
    loc = engine.inspect("q", "a")
    assert (loc.place, loc.score_ms, loc.priority) == ("pending", NOW - 5, 2)
    assert engine.reschedule("q", "a", delay_ms=60_000, now_ms=NOW) == (MoveOutcome.MOVED,
                                                                         NOW + 60_000)
    assert engine.client.zscore(k.pending, "a") == NOW + 60_000
    assert engine.cancel("q", "b").name == "CANCELLED"
    assert engine.client.zcard(k.ready) == 0
    assert claim_ids(engine) == []
    assert claim_ids(engine, now=NOW + 60_000) == ["a"]


def test_stats_count_every_due_job_and_the_oldest_across_priorities(engine: Engine) -> None:
    engine.enqueue("q", [new("p1", NOW - 50, 1), new("p9", NOW - 10, 9), new("m", NOW - 70, -3),
                         new("later", NOW + 100)], now_ms=NOW)
    engine.client.zadd(engine.keys("q").pending, {"unpromoted": NOW - 1})
    st = engine.stats("q", now_ms=NOW)
    assert (st.ready, st.scheduled, st.oldest_ready_ms, st.next_due_ms) == (
        4, 1, NOW - 70, NOW + 100)
    assert engine.oldest_pending("q") == ("m", NOW - 70)
