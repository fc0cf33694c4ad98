"""Jobs enqueued without an envelope: Redis keeps only the id (the Django layer's mode)."""

from __future__ import annotations

from django_delayq.engine import Engine, NackOutcome, NewJob

NOW = 1_800_000_000_000


def bare(id_: str, at: int = NOW) -> NewJob:
    return NewJob(id=id_, at_ms=at)


def test_only_the_id_is_stored(engine: Engine) -> None:
    assert engine.enqueue("q", [bare("a"), bare("b", NOW + 5)], now_ms=NOW) == 2
    k = engine.keys("q")
    assert engine.client.zrange(k.pending, 0, -1, withscores=True) == [(b"b", NOW + 5)]
    assert engine.client.zrange(k.ready, 0, -1) == [b"a"]  # due already
    assert not engine.client.exists(k.jobs)
    assert engine.inspect("q", "a").envelope is None


def test_idempotent_while_pending_in_flight_or_dead(engine: Engine) -> None:
    engine.enqueue("q", [bare("a"), bare("d")], now_ms=NOW)
    assert engine.enqueue("q", [bare("a", NOW + 9)], now_ms=NOW) == 0  # pending
    a, d = engine.claim("q", 2, 1000, now_ms=NOW).jobs
    assert engine.enqueue("q", [bare("a")], now_ms=NOW) == 0  # in flight
    assert engine.nack("q", [("d", d.token, None)], now_ms=NOW) == [NackOutcome.DEAD]
    assert engine.enqueue("q", [bare("d")], now_ms=NOW) == 0  # dead
    assert engine.ack("q", [("a", a.token)]) == [True]
    assert engine.enqueue("q", [bare("a")], now_ms=NOW) == 1  # done: a new job may reuse it


def test_claim_returns_an_empty_envelope(engine: Engine) -> None:
    engine.enqueue("q", [bare("a")], now_ms=NOW)
    [a] = engine.claim("q", 10, 1000, now_ms=NOW).jobs
    assert (a.id, a.due_ms, a.token, a.envelope, a.payload) == ("a", NOW, 1, "", None)


def test_recover_uses_the_max_attempts_the_caller_read(engine: Engine) -> None:
    engine.enqueue("q", [bare("one"), bare("many")], now_ms=NOW)
    engine.mark_started(engine.claim("q", 2, 10, now_ms=NOW).jobs)  # both ran
    assert sorted(engine.expiring("q", within_ms=10**13)) == ["many", "one"]
    found = engine.recover("q", default_max_attempts=5, max_attempts={"one": 1},
                           now_ms=NOW + 10)
    assert {r.id: r.outcome for r in found} == {"one": NackOutcome.DEAD,
                                                "many": NackOutcome.RETRYING}


def _told(engine: Engine, queue: str, enqueue: list[NewJob]) -> list[int]:
    """The due times ``queue``'s wake channel hears while ``enqueue`` goes in one call."""
    pubsub = engine.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(engine.keys(queue).channel)
    pubsub.get_message(timeout=1)
    engine.enqueue(queue, enqueue, now_ms=NOW)
    got = []
    while (m := pubsub.get_message(timeout=0.2)) is not None:
        got.append(int(m["data"]))
    pubsub.close()
    return got


def test_a_plain_job_wakes_the_workers_only_when_it_comes_first_on_an_idle_queue(
        engine: Engine) -> None:
    assert _told(engine, "q", [bare("a", NOW + 100)]) == [NOW + 100]  # nothing was there
    assert _told(engine, "q", [bare("b", NOW + 200)]) == []  # behind the head: silent
    assert _told(engine, "q", [bare("c", NOW + 50)]) == [NOW + 50]  # the new head
    assert _told(engine, "q", [bare("r")]) == [NOW]  # due now: straight to ready
    assert _told(engine, "q", [bare("d", NOW + 10)]) == []  # first, but ready holds a job
    assert _told(engine, "q", [bare("e", NOW + 5), bare("f", NOW + 300)]) == []
    assert engine.client.zrange(engine.keys("q").pending, 0, 0) == [b"e"]


def test_a_plain_job_in_a_grouped_queue_wakes_the_workers_when_no_group_is_in_turn(
        engine: Engine) -> None:
    engine.enqueue("g", [NewJob(id="x", at_ms=NOW + 500, group="t")], now_ms=NOW)
    k = engine.keys("g")
    engine.client.zadd(k.ready, {"y": 1})  # ready holds a job, yet no group has a turn
    assert not engine.client.exists(k.group_turns)
    assert _told(engine, "g", [bare("z", NOW + 100)]) == [NOW + 100]
