"""What enqueue.lua reads for a plain job, and that reading less kept its checks: a job
of one call due later than now is added with ``ZADD NX`` (pending is not read first),
one ``EXISTS`` tells whether the epoch, the envelopes hash, ``inflight``, ``ready`` and
``dead`` exist, and each of those is read only when it does; and that this short path
gives what the general path gives (reply, keyspace, wake-ups) for the same call."""

from __future__ import annotations

import re

import pytest
import redis

from django_delayq.engine import Engine, NewJob, scripts
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
    # pending's head, the keys, the cancel holds, ZADD NX
    short = {"zrange": 1, "exists": 2, "zadd": 1}
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
        "zrange": 1, "exists": 2, "zmscore": 2, "zadd": 1}
    plain.client.close()


def test_a_plain_job_due_first_reads_the_queue_idle_from_that_one_exists(plain: Engine) -> None:
    plain.enqueue("q", [NewJob(id="head", at_ms=LATER)], now_ms=NOW)
    # before the head, nothing ready: the workers are told, ready's EXISTS was the one read
    # (besides the cancel holds')
    assert _commands(plain, [NewJob(id="a", at_ms=NOW + 10)]) == {
        "zrange": 1, "exists": 2, "zadd": 1, "publish": 1}
    plain.enqueue("q", [NewJob(id="due", at_ms=NOW - 5)], now_ms=NOW)
    # ready holds a job: nobody is told (a grouped queue's rotation is read: is it empty?)
    assert _commands(plain, [NewJob(id="b", at_ms=NOW + 5)]) == {
        "zrange": 1, "exists": 3, "zscore": 1, "zadd": 1}
    plain.client.close()


# -- the short path against the general one ---------------------------------------------
# The same call run twice on two queues set up alike: as the engine sends it (a plain job
# due later: the short path) and with its priority written "0.0" (the general path reads
# it as 0, the short path's test wants "0"). Reply, keyspace and wake-up must agree.

MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999Z, the latest due time (lib.lua)
SEEDED_EPOCH = b"1:1:e"


def _keyspace(engine: Engine) -> dict[str, tuple[bytes, bytes | None]]:
    """Every key of the engine's prefix, named without it: (TYPE, DUMP); an epoch the call
    created (from the server's clock) by its form only."""
    out = {}
    for key in engine.client.scan_iter(match="*%s*" % engine.prefix, count=1000):
        name = key.decode().replace(engine.prefix, "P")
        value = engine.client.dump(key)
        if name.endswith(":epoch") and engine.client.get(key) != SEEDED_EPOCH:
            assert re.fullmatch(rb"\d+:\d+:e", engine.client.get(key))
            value = b"created"
        out[name] = (engine.client.type(key), value)
    return out


def _run(client: redis.Redis, setup, job: list[object], short: bool):  # type: ignore[no-untyped-def]
    """(reply, whether the short path ran, keyspace, wake-ups) of enqueueing ``job`` (its
    six ARGV) into queue "q" of a fresh prefix set up by ``setup(engine)``."""
    engine = Engine(client, prefix=unique_prefix())
    setup(engine)
    k = engine.keys("q")
    pubsub = client.pubsub()
    pubsub.subscribe(k.channel)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"  # in place before the call
    argv = [NOW, k.channel, *job[:4], job[4] if short else "0.0", job[5]]
    client.config_resetstat()
    reply = scripts.load("enqueue")(client, scripts.keys_of("enqueue", k), argv)
    general = "cmdstat_zmscore" in client.info("commandstats")  # held(): pending's scores
    client.publish(k.channel, "end")  # after the script's own PUBLISH, if any
    told = []
    while (m := pubsub.get_message(timeout=5)) is not None and m["data"] != b"end":
        told.append(m["data"])
    pubsub.close()
    space = _keyspace(engine)
    client.delete(*(key for key in client.scan_iter(match="*%s*" % engine.prefix)))
    return reply, not general, space, told


def _same_both_ways(client: redis.Redis, setup, job: list[object], short: bool = True):  # type: ignore[no-untyped-def]
    """The call's outcome, the same whether it took the short path (when ``short``) or
    the general one."""
    fast, slow = _run(client, setup, job, True), _run(client, setup, job, False)
    assert (fast[1], slow[1]) == (short, False)
    assert fast[0] == slow[0]  # {added, now}
    assert fast[3] == slow[3]  # the wake-ups
    assert fast[2] == slow[2]  # every key: type and DUMP
    return fast


PLACES = ("jobs", "epoch", "inflight", "ready", "dead")  # the EXISTS bits 1, 2, 4, 8, 16


def _seeded(mask: int, x_in: str | None, head: int | None):  # type: ignore[no-untyped-def]
    """A setup: the keys of ``PLACES`` in ``mask`` exist (job "x" in ``x_in``'s, "o" in
    the others), and, always, cancel, prio and group (the queue grouped) holding both;
    pending holds a job due at ``head`` (None: pending absent)."""
    def setup(engine: Engine) -> None:
        c, k = engine.client, engine.keys("q")
        for bit, place in enumerate(PLACES):
            if mask >> bit & 1:
                member = "x" if place == x_in else "o"
                if place == "jobs":
                    c.hset(k.jobs, member, ENV)
                elif place == "epoch":
                    c.set(k.epoch, SEEDED_EPOCH)
                elif place == "ready":
                    c.zadd(k.ready, {member: 100 * 2**44 + NOW - 5})
                else:
                    c.zadd(getattr(k, place), {member: NOW + 30_000})
        c.sadd(k.cancel, "x", "o")
        c.hset(k.prio, mapping={"x": 5, "o": -3})
        c.hset(k.group, mapping={"x": "g", "o": "g"})
        if head is not None:
            c.zadd(k.pending, {"h": head})
    return setup


@pytest.mark.parametrize("head", [None, LATER + 1000, LATER - 1000])
def test_the_short_path_decodes_which_keys_exist_as_the_general_one(any_redis_server,
                                                                    head) -> None:  # type: ignore[no-untyped-def]
    """Every combination of the keys ``EXISTS`` counts (the envelopes, the epoch,
    inflight, ready, dead), with the queue's other keys (cancel, prio, group) present
    and job "x" new or held in each that exists: the short path finds what the general
    path finds, writes the same and tells the same."""
    client = redis.Redis.from_url(any_redis_server.url)
    told = set()
    for mask in range(32):
        for x_in in [None, *(p for bit, p in enumerate(PLACES) if mask >> bit & 1 and p != "epoch")]:
            reply, _, space, got = _same_both_ways(client, _seeded(mask, x_in, head),
                                                   ["x", LATER, 0, "", 0, ""])
            assert reply[0] == (x_in is None), (mask, x_in)
            assert "{P:q}:epoch" in space
            told.add(bool(got))
    # told when "x" is added first in line and nothing is ready (ready absent, or
    # grouped with no group in the rotation: here always)
    assert told == ({False} if head == LATER - 1000 else {True, False})
    client.close()


@pytest.mark.parametrize("due", [MAX_MS, MAX_MS + 1, 10**15, 2**63 - 1, "1e300",
                                 ("-1", 10**16), ("-1", MAX_MS)])
def test_a_due_time_past_year_9999_is_clamped_alike_on_both_paths(any_redis_server,
                                                                  due) -> None:  # type: ignore[no-untyped-def]
    """A due time past 9999-12-31 (absolute, or now + a delay) is clamped to its last
    millisecond by the general path; the short path does the same, in an empty queue
    and behind a pending head, and leaves a job pending there already alone."""
    at, delay = due if isinstance(due, tuple) else (due, 0)
    client = redis.Redis.from_url(any_redis_server.url)

    def pending_at(score: int):  # type: ignore[no-untyped-def]
        return lambda engine: engine.client.zadd(engine.keys("q").pending, {"h": score})

    for setup, told in ((lambda engine: None, [str(MAX_MS).encode()]),
                        (pending_at(LATER), []), (pending_at(MAX_MS), [])):
        reply, _, space, got = _same_both_ways(client, setup, ["x", at, delay, "", 0, ""])
        assert (reply[0], got) == (1, told)
        assert space["{P:q}:pending"][0] == b"zset"
    again = _same_both_ways(client, lambda engine: engine.client.zadd(
        engine.keys("q").pending, {"x": MAX_MS}), ["x", at, delay, "", 0, ""])
    assert again[0][0] == 0
    client.close()


def _grouped(turns: bool, ready: bool, head: int | None):  # type: ignore[no-untyped-def]
    """A setup: a grouped queue whose group "g" has a job in flight ("f") and one ready
    ("r"), and is in the rotation when ``turns`` (else taken out of it, as a group limit
    does); without ``ready``, "r" was cancelled (the rotation keeps "g" until a claim meets
    its entry). Pending holds "h" due at ``head`` (None: pending absent)."""
    def setup(engine: Engine) -> None:
        engine.enqueue("q", [NewJob(id=i, at_ms=NOW - 10, group="g") for i in "fr"], now_ms=NOW)
        engine.claim("q", 1, 30_000, now_ms=NOW)
        k = engine.keys("q")
        # the claim's record is named after its claimer (its engine): not the queue's
        engine.client.delete(*engine.client.scan_iter(match="*%s*:claimed:*" % engine.prefix))
        if not ready:
            engine.cancel("q", "r")
        if not turns:
            engine.client.delete(k.group_turns)
        assert (engine.client.exists(k.ready), engine.client.exists(k.group_turns)) == (
            ready, turns)
        if head is not None:
            engine.enqueue("q", [NewJob(id="h", at_ms=head)], now_ms=NOW)
    return setup


@pytest.mark.parametrize("head", [None, LATER + 1000, LATER - 1000])
@pytest.mark.parametrize(("turns", "ready"), [(True, True), (True, False), (False, True),
                                              (False, False)])
def test_a_grouped_queue_with_a_group_in_turn_gets_what_the_general_path_gives(
        any_redis_server, turns, ready, head) -> None:  # type: ignore[no-untyped-def]
    """A plain job due later into a grouped queue (group "g" in the rotation or held out of
    it, with a job ready or none): the short path adds it to pending as the
    general path does, and tells the workers exactly when that does (the queue idle:
    nothing ready, or no group in the rotation). A job of a group never takes the short
    path (it must be written to the group hash): sent as the engine sends it, it gets the
    general path's outcome."""
    client = redis.Redis.from_url(any_redis_server.url)
    first = head is None or head > LATER
    for job, short in ((["x", LATER, 0, "", 0, ""], True), (["x", LATER, 0, "", 0, "g"], False),
                       (["x", LATER, 0, "", 0, "h2"], False)):
        reply, _, space, got = _same_both_ways(client, _grouped(turns, ready, head), job, short)
        assert reply[0] == 1
        assert got == ([str(LATER).encode()] if first and not (turns and ready) else [])
        assert ("{P:q}:group" in space) and space["{P:q}:pending"][0] == b"zset"
    client.close()
