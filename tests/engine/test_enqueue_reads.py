"""What enqueue.lua reads for a plain job, and that reading less kept its checks: a job
of one call due later than now is added with ``ZADD NX`` (pending is not read first),
one ``EXISTS`` tells whether the epoch, the envelopes hash, ``inflight``, ``ready`` and
``dead`` exist, and each of those is read only when it does."""

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


def _commands(engine: Engine, jobs: list[NewJob], now_ms: int | None = NOW) -> dict[str, int]:
    """The commands (INFO commandstats names) one enqueue of ``jobs`` ran inside its script;
    each job must be new."""
    engine.client.config_resetstat()
    assert engine.enqueue("q", jobs, now_ms=now_ms) == len(jobs)
    stats = engine.client.info("commandstats")
    return {name.removeprefix("cmdstat_"): v["calls"] for name, v in stats.items()
            if name not in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_config|resetstat",
                            "cmdstat_config")}  # 6.2 names no subcommand


def test_a_plain_job_reads_only_the_keys_that_exist(plain: Engine) -> None:
    # a head of pending due before them: whether the queue is idle is not read either
    plain.enqueue("q", [NewJob(id="head", at_ms=NOW + 1000)], now_ms=NOW)
    short = {"zrange": 1, "exists": 1, "zadd": 1}  # pending's head, the keys, ZADD NX
    assert _commands(plain, [NewJob(id="a", at_ms=LATER)]) == short
    plain.enqueue("q", [NewJob(id="due", at_ms=NOW - 5)], now_ms=NOW)
    assert _commands(plain, [NewJob(id="b", at_ms=LATER)]) == dict(short, zscore=1)  # ready
    [claimed] = plain.claim("q", 1, 30_000, now_ms=NOW).jobs  # ready is gone, inflight not
    assert _commands(plain, [NewJob(id="c", at_ms=LATER)]) == dict(short, zscore=1)
    plain.nack("q", [("due", claimed.token, None)], now_ms=NOW)  # dead, inflight gone
    assert _commands(plain, [NewJob(id="d", at_ms=LATER)]) == dict(short, zscore=1)
    # the server's clock: one TIME, the due time counted from it (before the head or not,
    # as the machine's clock stands: then the workers are told)
    got = _commands(plain, [NewJob(id="e", delay_ms=3_600_000)], now_ms=None)
    assert got.pop("time") == 1 and got.pop("publish", 1) == 1
    assert got == dict(short, zscore=1)
    # two jobs: pending's scores, then the one key that exists (dead); no ZADD NX
    assert _commands(plain, [NewJob(id="f", at_ms=LATER), NewJob(id="g", at_ms=LATER)]) == {
        "zrange": 1, "exists": 1, "zmscore": 2, "zadd": 1}
    plain.client.close()


def test_a_plain_job_due_first_reads_the_queue_idle_from_that_one_exists(plain: Engine) -> None:
    plain.enqueue("q", [NewJob(id="head", at_ms=LATER)], now_ms=NOW)
    # before the head, nothing ready: the workers are told, ready's EXISTS was the one read
    assert _commands(plain, [NewJob(id="a", at_ms=NOW + 10)]) == {
        "zrange": 1, "exists": 1, "zadd": 1, "publish": 1}
    plain.enqueue("q", [NewJob(id="due", at_ms=NOW - 5)], now_ms=NOW)
    # ready holds a job: nobody is told (a grouped queue's rotation is read: is it empty?)
    assert _commands(plain, [NewJob(id="b", at_ms=NOW + 5)]) == {
        "zrange": 1, "exists": 2, "zscore": 1, "zadd": 1}
    plain.client.close()
