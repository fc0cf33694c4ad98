"""Pausing one group (group_control.lua, claim.lua): none of its jobs is claimed, the
other groups go on, a job of it that comes due meanwhile waits, and resuming brings its
jobs back in turns; a queue holding only paused groups' jobs is not worth claiming now."""

from __future__ import annotations

from django_delayq.engine import Engine, NewJob

NOW = 1_700_000_000_000


def claim_ids(engine: Engine, n: int, now: int = NOW) -> list[str]:
    return [j.id for j in engine.claim("q", n, 60_000, now_ms=now).jobs]


def test_a_paused_group_waits_and_the_others_go_on(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="%s%d" % (g, i), at_ms=NOW, group=g)
                         for g in "ab" for i in range(3)], now_ms=NOW)
    assert engine.pause_group("q", "a") and not engine.pause_group("q", "a")
    assert engine.paused_groups("q") == ["a"]
    engine.enqueue("q", [NewJob(id="a9", at_ms=NOW, group="a"), NewJob(id="n0", at_ms=NOW)],
                   now_ms=NOW)
    assert sorted(claim_ids(engine, 10)) == ["b0", "b1", "b2", "n0"]
    result = engine.claim("q", 10, 60_000, now_ms=NOW)
    assert result.jobs == [] and result.next_due_ms is None  # only the paused group's
    assert engine.resume_group("q", "a") and not engine.resume_group("q", "a")
    assert engine.paused_groups("q") == []
    assert claim_ids(engine, 10) == ["a0", "a1", "a2", "a9"]


def test_pausing_a_group_of_another_queue_or_with_nothing_due(engine: Engine) -> None:
    assert engine.pause_group("q", "nobody") and engine.resume_group("q", "nobody")
    engine.enqueue("q", [NewJob(id="x", at_ms=NOW, group="g")], now_ms=NOW)
    engine.pause_group("other", "g")
    assert claim_ids(engine, 1) == ["x"]


def test_a_job_without_a_group_is_claimed_once_the_last_grouped_job_is_gone(
        engine: Engine) -> None:
    """The paused group's index entries outlive its cancelled job; once no job of the
    queue has a group, the claim takes the plain path and drops them: a job without a
    group is never hidden behind them."""
    engine.enqueue("q", [NewJob(id="a0", at_ms=NOW, group="a")], now_ms=NOW)
    assert engine.pause_group("q", "a")
    assert claim_ids(engine, 10) == []  # indexes a0 under its paused group
    assert engine.cancel("q", "a0").name == "CANCELLED"
    engine.enqueue("q", [NewJob(id="b", at_ms=NOW)], now_ms=NOW)
    assert claim_ids(engine, 10) == ["b"]
    assert engine.paused_groups("q") == ["a"]  # the pause stays for the group's next jobs
    engine.enqueue("q", [NewJob(id="a1", at_ms=NOW, group="a"), NewJob(id="c", at_ms=NOW)],
                   now_ms=NOW)
    assert claim_ids(engine, 10) == ["c"]
    assert engine.resume_group("q", "a")
    assert claim_ids(engine, 10) == ["a1"]
