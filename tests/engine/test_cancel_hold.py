"""Cancel holds (lua/cancel.lua's ``hold_ms``): a cancel that finds its job nowhere in
Redis, asked to hold it, keeps a job of that id that arrives afterwards (a send or a
reconciler's re-enqueue) in pending until the hold ends; the cancel sent later without
a hold removes job and hold together. Real redis-servers and a real local cluster."""

from __future__ import annotations

from django_delayq.engine import CancelOutcome, Engine, NewJob

HOLD = 300_000
LEASE = 30_000


def _held(engine: Engine, queue: str, id_: str) -> float | None:
    return engine.client.zscore(engine.keys(queue).hold, id_)  # type: ignore[no-any-return]


def _claimed(engine: Engine, queue: str) -> list[str]:
    return [j.id for j in engine.claim(queue, 50, LEASE).jobs]


def test_a_job_arriving_after_a_holding_cancel_waits_until_the_cancel_after_commit(
        engine: Engine) -> None:
    before = engine.time_ms()
    assert engine.cancel_held("q", "sent-late", HOLD) is CancelOutcome.NOT_FOUND
    assert (_held(engine, "q", "sent-late") or 0) >= before + HOLD
    # the job's send lands now (due at once), beside a job of its queue with no hold
    assert engine.enqueue("q", [NewJob(id="sent-late"), NewJob(id="other")]) == 2
    assert _claimed(engine, "q") == ["other"]
    loc = engine.inspect("q", "sent-late")
    assert loc.place == "pending" and (loc.score_ms or 0) >= before + HOLD
    # the canceller committed: its cancel without a hold removes the job and the hold
    assert engine.cancel("q", "sent-late") is CancelOutcome.CANCELLED
    assert engine.inspect("q", "sent-late").place == ""
    assert _held(engine, "q", "sent-late") is None


def test_the_short_path_of_a_delayed_job_keeps_the_later_of_its_due_and_the_hold(
        engine: Engine) -> None:
    engine.cancel_held("q", "soon", HOLD)
    engine.cancel_held("q", "later", HOLD)
    hold_end = _held(engine, "q", "soon") or 0
    engine.enqueue("q", [NewJob(id="soon", delay_ms=1_000)])
    engine.enqueue("q", [NewJob(id="later", delay_ms=2 * HOLD)])
    assert engine.inspect("q", "soon").score_ms == hold_end
    assert (engine.inspect("q", "later").score_ms or 0) > hold_end + HOLD / 2


def test_a_reconciler_re_enqueue_is_held_back_too(engine: Engine) -> None:
    now = engine.time_ms()
    engine.cancel_held("q", "lost", HOLD)
    added = engine.reenqueue("q", [("lost", now), ("kept", now)], {},
                             keep_ms=60_000, keep_max=1_000)
    assert added == 2
    assert _claimed(engine, "q") == ["kept"]
    assert engine.inspect("q", "lost").place == "pending"


def test_a_cancel_that_finds_its_job_keeps_no_hold_and_one_without_hold_ends_it(
        engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="waiting", delay_ms=60_000)])
    assert engine.cancel_held("q", "waiting", HOLD) is CancelOutcome.CANCELLED
    assert _held(engine, "q", "waiting") is None
    engine.enqueue("q", [NewJob(id="running")])
    assert _claimed(engine, "q") == ["running"]
    assert engine.cancel_held("q", "running", HOLD) is CancelOutcome.ALREADY_RUNNING
    assert _held(engine, "q", "running") is None
    engine.cancel_held("q", "gone", HOLD)
    assert engine.cancel("q", "gone") is CancelOutcome.NOT_FOUND
    assert _held(engine, "q", "gone") is None
    # with no hold left, the job arrives as any: due at once
    engine.enqueue("q", [NewJob(id="gone")])
    assert _claimed(engine, "q") == ["gone"]


def test_a_hold_that_ended_holds_nothing_and_each_new_hold_drops_100_ended_ones(
        engine: Engine) -> None:
    now = engine.time_ms()
    hold_key = engine.keys("q").hold
    engine.client.zadd(hold_key, {"old-%d" % i: now - 1_000 - i for i in range(150)})
    engine.enqueue("q", [NewJob(id="old-0")])
    assert _claimed(engine, "q") == ["old-0"]  # its hold had ended
    engine.cancel_held("q", "fresh", HOLD)
    assert engine.client.zcard(hold_key) == 51  # 100 ended ones dropped, "fresh" added
    engine.cancel_held("q", "fresh2", HOLD)
    assert engine.client.zcard(hold_key) == 2


def test_a_reschedule_moves_a_held_job_no_earlier_than_its_hold(engine: Engine) -> None:
    engine.cancel_held("q", "held", HOLD)
    hold_end = _held(engine, "q", "held") or 0
    engine.enqueue("q", [NewJob(id="held")])
    outcome, due = engine.reschedule("q", "held", delay_ms=0)
    assert due == hold_end and engine.inspect("q", "held").score_ms == hold_end
    assert _claimed(engine, "q") == []
    engine.enqueue("q", [NewJob(id="free", delay_ms=60_000)])
    assert engine.reschedule("q", "free", delay_ms=0)[0] is outcome
    assert _claimed(engine, "q") == ["free"]


def test_the_hold_key_expires_with_its_last_hold(engine: Engine) -> None:
    hold_key = engine.keys("q").hold
    engine.cancel_held("q", "a", HOLD)
    assert HOLD - 60_000 < engine.client.pttl(hold_key) <= HOLD
    engine.client.pexpire(hold_key, 1_000)  # as if most of its time had passed
    engine.cancel_held("q", "b", HOLD)
    assert engine.client.pttl(hold_key) > HOLD - 60_000  # kept as long as "b" holds


def test_a_job_settled_a_moment_ago_is_not_cancelled_and_gets_no_hold(engine: Engine) -> None:
    """Acked with a holder (a worker's record, its audit row not landed yet): the row must
    not decide, its worker's row records the run."""
    engine.enqueue("q", [NewJob(id="done")])
    token = engine.claim("q", 1, LEASE).jobs[0].token
    assert engine.ack("q", [("done", token)], holder="w:1") == [True]
    assert engine.cancel_held("q", "done", HOLD) is None
    assert _held(engine, "q", "done") is None
    assert engine.cancel("q", "done") is CancelOutcome.NOT_FOUND
