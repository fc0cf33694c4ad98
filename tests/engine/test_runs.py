"""Start marks: a lease taken back from a dead worker costs an attempt only when its run
started (real Redis)."""

from __future__ import annotations

import signal
import subprocess
import sys

from django_delayq.engine import Engine, NackOutcome, NewJob
from tests.helpers import wait_until

NOW = 1_800_000_000_000
LEASE = 1000


def claim(engine: Engine, n: int, at: int = NOW):  # type: ignore[no-untyped-def]
    return engine.claim("q", n, LEASE, now_ms=at).jobs


def recover(engine: Engine, at: int, max_attempts: int = 3) -> dict[str, tuple[int, int]]:
    found = engine.recover("q", default_max_attempts=max_attempts, now_ms=at)
    return {r.id: (int(r.outcome), r.attempts) for r in found}


def test_a_delivery_that_never_started_costs_no_attempt(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="a", at_ms=NOW), NewJob(id="b", at_ms=NOW)], now_ms=NOW)
    a, b = claim(engine, 2)
    assert (a.token, a.attempt, b.token, b.attempt) == (1, 1, 1, 1)
    engine.mark_started([a])  # a started, b waited for a thread; the worker died
    later = NOW + LEASE + 1
    assert recover(engine, later) == {"a": (NackOutcome.RETRYING, 1),
                                      "b": (NackOutcome.NOT_STARTED, 0)}
    again = {j.id: j for j in claim(engine, 2, later)}
    assert (again["a"].token, again["a"].attempt) == (2, 2)
    assert (again["b"].token, again["b"].attempt) == (2, 1)  # a new token, its first run


def test_max_attempts_counts_runs_not_deliveries(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="a", at_ms=NOW)], now_ms=NOW)
    at = NOW
    for _ in range(3):  # three deliveries lost before a thread took the job
        assert claim(engine, 1, at)
        at += LEASE + 1
        assert recover(engine, at, max_attempts=1) == {"a": (NackOutcome.NOT_STARTED, 0)}
    (job,) = claim(engine, 1, at)
    assert (job.token, job.attempt) == (4, 1)
    engine.mark_started([job])
    at += LEASE + 1
    assert recover(engine, at, max_attempts=1) == {"a": (NackOutcome.DEAD, 1)}


def test_marks_are_forgotten_with_the_job(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="a", at_ms=NOW)], now_ms=NOW)
    (job,) = claim(engine, 1)
    engine.mark_started([job])
    assert engine.client.hget(engine.keys("q").runs, "a") == b"1 0 0"
    assert engine.ack("q", [("a", job.token)], now_ms=NOW) == [True]
    assert engine.client.hexists(engine.keys("q").runs, "a") == 0


def test_one_mark_and_several_in_a_call_write_only_what_is_still_held(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW) for i in "abc"], now_ms=NOW)
    a, b, c = claim(engine, 3)
    assert engine.ack("q", [("b", b.token)], now_ms=NOW) == [True]
    assert engine.mark_started([a, b, c]) == 2  # b was acked: its mark writes nothing
    runs = engine.keys("q").runs
    assert engine.client.hgetall(runs) == {b"a": b"1 0 0", b"c": b"1 0 0"}
    assert engine.mark_started([b]) == 0 and engine.mark_started([c]) == 1
    assert engine.client.hlen(runs) == 2


def test_a_mark_of_an_older_delivery_does_not_count(engine: Engine) -> None:
    """A mark left by an earlier delivery (its token) does not make the current one
    started: a lost lease of the current one is not charged."""
    engine.enqueue("q", [NewJob(id="a", at_ms=NOW)], now_ms=NOW)
    (job,) = claim(engine, 1)
    engine.mark_started([job])
    assert engine.nack("q", [("a", job.token, 0)], now_ms=NOW) == [NackOutcome.RETRYING]
    (job,) = claim(engine, 1)
    assert (job.token, job.attempt) == (2, 2)
    assert recover(engine, NOW + LEASE + 1) == {"a": (NackOutcome.NOT_STARTED, 1)}
    (job,) = claim(engine, 1, NOW + LEASE + 1)
    assert (job.token, job.attempt) == (3, 2)


def test_the_ack_stream_writes_marks_on_a_connection_redis_never_answers(
        engine: Engine) -> None:
    stream = engine.ack_stream("w:1")
    if stream is None:  # a cluster: marks are ordinary calls (mark_started)
        return
    try:
        engine.enqueue("q", [NewJob(id=i, at_ms=NOW) for i in "ab"], now_ms=NOW)
        a, b = claim(engine, 2)
        for job in (a, b):
            assert stream.mark(*engine.start_mark(job))
        assert stream.send("q", [("a", a.token)], ["s"], "tag")
        replies = []
        while len(replies) < 1:
            replies += stream.read(5.0)
        assert [(r.tag, r.acked) for r in replies] == [("tag", [True])]
        assert stream.in_flight() == 0
        wait_until(lambda: engine.client.hget(engine.keys("q").runs, "b") == b"1 0 0")
        assert stream.mark(*engine.start_mark(b))  # the connection is still usable
        assert not engine.client.hexists(engine.keys("q").runs, "a")  # acked: forgotten
        late = engine.start_mark(a)  # a mark arriving after the job's ack writes nothing
        assert engine.mark_started([a]) == 0 and engine.client.hlen(late[0][1]) == 1
    finally:
        stream.close()


def test_a_mark_written_just_before_a_sigkill_reaches_redis(engine: Engine) -> None:
    """The marks' connection may hold a mark back (corked) for a while; the kernel still
    sends it when the process dies: a run whose mark was written counts as started."""
    kw = getattr(engine.client, "connection_pool", None)
    if kw is None:  # a cluster: marks are calls
        return
    engine.enqueue("q", [NewJob(id="a", at_ms=NOW)], now_ms=NOW)
    (a,) = claim(engine, 1)
    keys, args = engine.start_mark(a)
    url = kw.connection_kwargs
    script = (
        "import os, signal, redis\n"
        "from django_delayq.engine.acks import AckStream\n"
        "c = redis.Redis(host=%r, port=%r, unix_socket_path=%r, db=%r)\n"
        "s = AckStream(c, None, 'w')\n"
        "assert s.mark(%r, %r)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n" % (
            url.get("host", "localhost"), url.get("port", 6379), url.get("path"),
            url.get("db", 0), keys, args))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    wait_until(lambda: engine.client.hget(engine.keys("q").runs, "a") == b"1 0 0")
    assert recover(engine, NOW + LEASE + 1) == {"a": (NackOutcome.RETRYING, 1)}


def test_a_settled_record_names_the_attempt_not_the_token(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="a", at_ms=NOW)], now_ms=NOW)
    claim(engine, 1)  # a delivery that never started: its worker died
    assert recover(engine, NOW + LEASE + 1) == {"a": (NackOutcome.NOT_STARTED, 0)}
    (a,) = claim(engine, 1, NOW + LEASE + 1)
    assert (a.token, a.attempt) == (2, 1)
    engine.mark_started([a])
    assert engine.ack("q", [("a", a.token)], holder="w:1") == [True]
    (p,) = engine.presence("q", ["a"])
    assert p.settled is not None and p.settled.attempt == 1


def test_a_planted_offset_never_makes_an_attempt_number_below_one(engine: Engine) -> None:
    """A runs entry written by hand (an offset above the token, a huge one) is kept below
    the token: attempts stay 1 or more and max_attempts still ends the job."""
    engine.enqueue("q", [NewJob(id="a", at_ms=NOW)], now_ms=NOW)
    engine.client.hset(engine.keys("q").runs, "a", "0 99999999999999999999999 0")
    at = NOW
    outcomes = []
    for _ in range(3):
        (job,) = claim(engine, 1, at)
        assert job.attempt >= 1
        engine.mark_started([job])
        at += LEASE + 1
        outcomes.append(recover(engine, at, max_attempts=2)["a"])
        if outcomes[-1][0] == NackOutcome.DEAD:
            break
    assert outcomes[-1][0] == NackOutcome.DEAD and len(outcomes) <= 2
    assert engine.inspect("q", "a").attempts >= 1


def test_a_mark_arriving_after_its_delivery_was_given_back_writes_nothing(
        engine: Engine) -> None:
    """A give-back keeps the token counter while the job waits (a token is never handed
    out twice): a late start mark of the given-back delivery (its call timed out while
    still queued, a child's corked stream flushed after the parent handed the job back)
    still names the counter's token, yet the job is no longer in flight: it writes
    nothing, so the next claim's attempt number is the one given back."""
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW) for i in "abcd"], now_ms=NOW)
    a, b, c, d = claim(engine, 4)
    assert engine.defer("q", [("a", a.token, NOW)], now_ms=NOW) == [True]
    assert engine.release("q", [b], now_ms=NOW) == [True]
    runs = engine.keys("q").runs
    given_back = engine.client.hmget(runs, ["a", "b"])
    assert engine.mark_started([a]) == 0  # one mark: the single-triple path
    assert engine.mark_started([b, c]) == 1  # several in a call: only c is held
    stream = engine.ack_stream("w:1")
    if stream is None:  # a cluster: marks are calls
        assert engine.mark_started([d]) == 1
    else:  # the marks' connection (the job threads' path), in order: a's, then d's
        try:
            assert stream.mark(*engine.start_mark(a)) and stream.mark(*engine.start_mark(d))
            wait_until(lambda: engine.client.hget(runs, "d") == b"1 0 0")
        finally:
            stream.close()
    assert engine.client.hmget(runs, ["a", "b"]) == given_back
    again = {j.id: j for j in claim(engine, 2)}
    assert again["a"].token > a.token and again["b"].token > b.token
    assert (again["a"].attempt, again["b"].attempt) == (1, 1)
