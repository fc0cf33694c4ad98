"""What enqueue.lua reads for a plain job, and that reading less kept its checks: a job
of one call due later than now is added with ``ZADD NX`` (pending is not read first),
one ``EXISTS`` tells whether the epoch, the envelopes hash and ``inflight`` exist, and
``inflight`` is read only when it does."""

from __future__ import annotations

import pytest
import redis

from django_delayq.engine import Engine, NewJob
from django_delayq.engine.envelope import Envelope
from tests.conftest import unique_prefix

NOW = 1_800_000_000_000
LATER = NOW + 60_000
ENV = Envelope(path="tests.jobs.noop", args=[1]).encode()


@pytest.fixture
def plain(any_redis_server) -> Engine:  # type: ignore[no-untyped-def]
    return Engine(redis.Redis.from_url(any_redis_server.url), prefix=unique_prefix())


def _place(engine: Engine, place: str) -> None:
    """Job "x" known to the queue in ``place``."""
    k = engine.keys("q")
    if place == "pending":
        engine.enqueue("q", [NewJob(id="x", at_ms=LATER + 5)], now_ms=NOW)
    elif place == "envelope":  # an envelope, listed nowhere
        engine.enqueue("q", [NewJob(id="x", at_ms=LATER + 5, envelope=ENV)], now_ms=NOW)
        engine.client.zrem(k.pending, "x")
    else:
        engine.enqueue("q", [NewJob(id="x", at_ms=NOW - 5)], now_ms=NOW)
        if place != "ready":
            [claimed] = engine.claim("q", 1, 30_000, now_ms=NOW).jobs
            if place == "dead":
                engine.nack("q", [("x", claimed.token, None)], now_ms=NOW)


@pytest.mark.parametrize("place", ["pending", "ready", "inflight", "dead", "envelope"])
def test_a_plain_job_known_anywhere_is_left_alone(plain: Engine, place: str) -> None:
    _place(plain, place)
    k = plain.keys("q")
    before = {key: plain.client.dump(key) for key in (k.pending, k.ready, k.inflight, k.dead)}
    assert plain.enqueue("q", [NewJob(id="x", at_ms=LATER)], now_ms=NOW) == 0
    assert {key: plain.client.dump(key) for key in before} == before
    plain.client.close()


def test_a_plain_job_already_pending_wakes_nobody(plain: Engine) -> None:
    pubsub = plain.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(plain.keys("q").channel)
    pubsub.get_message(timeout=1)
    plain.enqueue("q", [NewJob(id="a", at_ms=LATER)], now_ms=NOW)  # the head: told
    # again, earlier than the head: left alone, nobody told
    assert plain.enqueue("q", [NewJob(id="a", at_ms=LATER - 30)], now_ms=NOW) == 0
    plain.enqueue("q", [NewJob(id="b", at_ms=LATER - 10)], now_ms=NOW)  # told: the last
    got: list[int] = []
    while LATER - 10 not in got and (m := pubsub.get_message(timeout=5)) is not None:
        got.append(int(m["data"]))
    assert got == [LATER, LATER - 10]
    assert plain.client.zscore(plain.keys("q").pending, "a") == LATER
    pubsub.close()
    plain.client.close()


def test_the_epoch_is_created_when_absent_envelopes_or_not(plain: Engine) -> None:
    k = plain.keys("q")
    plain.enqueue("q", [NewJob(id="a", at_ms=LATER, envelope=ENV)], now_ms=NOW)
    first = plain.client.get(k.epoch)
    assert first is not None and first.endswith(b":e")
    plain.enqueue("q", [NewJob(id="b", at_ms=LATER)], now_ms=NOW)
    assert plain.client.get(k.epoch) == first  # kept
    for envelope in (ENV, None):  # the envelopes hash exists either way
        plain.client.delete(k.epoch)
        plain.enqueue("q", [NewJob(id="c%s" % bool(envelope), at_ms=LATER, envelope=envelope)],
                      now_ms=NOW)
        assert plain.client.get(k.epoch) is not None
    plain.client.close()


def test_a_plain_job_reads_inflight_only_when_it_exists(plain: Engine) -> None:
    def reads(job_id: str) -> tuple[int, int]:
        plain.client.config_resetstat()
        assert plain.enqueue("q", [NewJob(id=job_id, at_ms=LATER)], now_ms=NOW) == 1
        stats = plain.client.info("commandstats")
        return stats["cmdstat_zmscore"]["calls"], stats["cmdstat_exists"]["calls"]

    plain.enqueue("q", [NewJob(id="due", at_ms=NOW - 5)], now_ms=NOW)
    # a head of pending due before them: whether the queue is idle is not read either
    plain.enqueue("q", [NewJob(id="head", at_ms=NOW + 1000)], now_ms=NOW)
    assert reads("a") == (2, 1)  # ready and dead; one EXISTS (pending: its ZADD NX)
    plain.claim("q", 1, 30_000, now_ms=NOW)
    assert reads("b") == (3, 1)  # inflight too
    plain.client.close()
