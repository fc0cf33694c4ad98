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
