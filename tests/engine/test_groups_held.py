"""``Engine.held_groups`` on the Redis server's clock: a group held by its rate is no
longer said held once its time has passed, though no claim came to take its mark out of
``group_held`` (a paused or idle queue); one held by its concurrency stays held while its
jobs in flight fill it, whatever the time, and not once a slot frees."""

from __future__ import annotations

from django_delayq.engine import Engine, NewJob
from django_delayq.engine.outcomes import QueueLimit
from tests.helpers import wait_until

WINDOW_MS = 300


def _enqueue(engine: Engine, group: str, n: int) -> None:
    now = engine.time_ms()
    engine.enqueue("q", [NewJob(id="%s%02d" % (group, i), at_ms=now - 10, group=group)
                         for i in range(n)])


def _passed(engine: Engine, ms: int) -> bool:
    return engine.time_ms() > ms


def test_a_rate_hold_ends_at_its_time_without_a_claim(engine: Engine) -> None:
    engine.set_queue_limit("q", rate=None, concurrency=None,
                           groups=QueueLimit(rate=(2, WINDOW_MS), concurrency=5))
    _enqueue(engine, "ga", 10)
    assert len(engine.claim("q", 10, 60_000).jobs) == 2
    refused = engine.claim("q", 10, 60_000)
    assert refused.jobs == [] and refused.limited
    until = engine.held_groups("q")["ga"]
    assert engine.held_groups("q", ["ga", "gb"]) == {"ga": until}
    engine.pause("q")  # no claim from here on
    wait_until(lambda: _passed(engine, until), timeout=10)
    assert engine.client.zscore(engine.keys("q").group_held, "ga") == until  # still marked
    assert engine.held_groups("q") == {}
    assert engine.held_groups("q", ["ga"]) == {}
    assert engine.held_groups("q", ["ga"], now_ms=until - 1) == {"ga": until}


def test_a_concurrency_hold_lasts_while_the_slots_are_full(engine: Engine) -> None:
    lease_ms = 200  # the mark's time: a claim looks again a lease later
    engine.set_queue_limit("q", rate=None, concurrency=None, groups=QueueLimit(concurrency=2))
    _enqueue(engine, "ga", 5)
    jobs = engine.claim("q", 10, lease_ms).jobs
    assert len(jobs) == 2 and engine.claim("q", 10, lease_ms).limited
    until = engine.held_groups("q")["ga"]
    engine.pause("q")
    wait_until(lambda: _passed(engine, until), timeout=10)
    assert engine.held_groups("q", ["ga"]) == {"ga": until}  # both jobs still in flight
    engine.set_group_limit("q", "ga", rate=None, concurrency=3)  # an override with room
    assert engine.held_groups("q", ["ga"]) in ({}, {"ga": until})  # taken out, or not full
    engine.set_group_limit("q", "ga", rate=None, concurrency=2)
    marked = engine.client.zscore(engine.keys("q").group_held, "ga")
    assert engine.held_groups("q") == ({} if marked is None else {"ga": int(marked)})
    assert engine.ack("q", [(jobs[0].id, jobs[0].token)]) == [True]  # a slot frees
    assert engine.held_groups("q") == {}
