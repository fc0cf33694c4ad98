"""A claim whose reply is lost: asked again, it is answered from the claim record, and
nothing is leased twice or stranded until its lease ends (real Redis)."""

from __future__ import annotations

import threading

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_delayq.engine import Engine, NewJob, scripts
from django_delayq.engine.outcomes import lease_clock
from tests.conftest import unique_prefix

NOW = 1_800_000_000_000


def test_a_claim_asked_again_under_its_nonce_answers_the_same_jobs(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW) for i in "abcd"], now_ms=NOW)
    k = engine.keys("q")
    keys = scripts.keys_of("claim", k, record=k.claim_record("me"))
    first = engine._run("claim", keys, [NOW, 3, 60_000, "n1"])
    again = engine._run("claim", keys, [NOW, 3, 60_000, "n1"])  # the reply of `first` lost
    assert first[7:] == again[7:] and len(first[7:]) == 15  # 3 jobs: id, due, token, n, env
    assert again[1] == NOW  # claim again now
    assert engine.client.hgetall(k.attempts) == {i.encode(): b"1" for i in "abc"}
    rest = engine._run("claim", keys, [NOW, 3, 60_000, "n2"])  # a new claim: the rest
    assert rest[7::5] == [b"d"]


def test_a_job_settled_since_is_not_answered_again(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW) for i in "ab"], now_ms=NOW)
    k = engine.keys("q")
    keys = scripts.keys_of("claim", k, record=k.claim_record("me"))
    first = engine._run("claim", keys, [NOW, 2, 60_000, "n1"])
    assert engine.ack("q", [(first[7].decode(), int(first[9]))], now_ms=NOW) == [True]
    again = engine._run("claim", keys, [NOW, 2, 60_000, "n1"])
    assert again[7::5] == [first[12]]


def test_a_claim_whose_reply_timed_out_is_answered_by_the_next(redis_server) -> None:
    """The claim reaches a Redis busy (a script) past the client's timeout; Redis runs it later. The
    next claim of the same engine and thread gets those jobs, under their one token."""
    url = redis_server.url  # one server: the cluster runs the same script
    admin = redis.Redis.from_url(url)
    slow = redis.Redis.from_url(url, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
    engine = Engine(slow, prefix=unique_prefix())
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW) for i in "abc"], now_ms=NOW)
    engine.claim("other", 1, 60_000, now_ms=NOW)  # loads the script
    spin = ("local t = redis.call('TIME'); local e = t[1] * 1e6 + t[2] + 1.5e6; "
            "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] >= e; return 1")
    busy = threading.Thread(target=lambda: redis.Redis.from_url(url).eval(spin, 0))  # busy 1.5 s
    busy.start()
    probe = redis.Redis.from_url(url, socket_timeout=0.05, retry=Retry(NoBackoff(), 0))
    try:
        while True:  # until the server is busy (a PING goes unanswered)
            try:
                probe.ping()
            except (redis.TimeoutError, redis.ConnectionError):
                break
        with pytest.raises((redis.TimeoutError, redis.ConnectionError)):
            engine.claim("q", 2, 60_000, now_ms=NOW)
    finally:
        busy.join()
        probe.close()
    tokens = admin.hgetall(engine.keys("q").attempts)
    got = engine.claim("q", 2, 60_000, now_ms=NOW)
    assert {j.id: j.token for j in got.jobs} == {i.decode(): int(t) for i, t in tokens.items()}
    assert len(got.jobs) == 2 and all(j.token == 1 for j in got.jobs)
    admin.close()
    slow.close()


def test_jobs_answered_again_keep_the_lease_of_the_claim_first_sent(engine: Engine,  # type: ignore[no-untyped-def]
                                                                    monkeypatch) -> None:
    """A claimed job tells when its lease ends at the earliest on this process's clock
    (``lease_until``): from the claim's send; for jobs a claim asked again answers, from
    the send of the claim whose reply was lost (their lease began then)."""
    engine.enqueue("q", [NewJob(id="a")])  # due now, on the Redis clock
    run = engine._script

    def reply_lost(*args, **kwargs):  # type: ignore[no-untyped-def]
        run(*args, **kwargs)
        raise redis.ConnectionError("the reply is lost")

    monkeypatch.setattr(engine, "_script", reply_lost)
    before = lease_clock()
    with pytest.raises(redis.ConnectionError):
        engine.claim("q", 1, 60_000)
    monkeypatch.setattr(engine, "_script", run)
    lost_at = lease_clock()
    [job] = engine.claim("q", 1, 60_000).jobs
    assert job.id == "a" and before <= job.lease_until - 60 <= lost_at
    engine.enqueue("q", [NewJob(id="b")])
    sent = lease_clock()
    [b] = engine.claim("q", 1, 60_000).jobs
    assert sent <= b.lease_until - 60 <= lease_clock()
