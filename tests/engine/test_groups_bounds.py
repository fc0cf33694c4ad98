"""A grouped queue's scripts stay under 5 ms Redis-side with a 100,000-job backlog
(invariant 3), judged as tests/engine/test_script_bounds.py judges them: 50,000 due jobs
of one group and 50,000 of 10,000 groups (half enqueued before they were due, so claims
promote them, half due at once), drained by claims of 100 with acks, nacks, releases and
cancels along the way; and the same backlog claimed with every group limited (concurrency
and rate, so that claims meet held groups, refuse groups and put them back, and acks put
held groups back). Select it with ``-m script_bounds``."""

from __future__ import annotations

import time

import pytest

from django_delayq.engine import Engine, NewJob, scripts
from django_delayq.engine.outcomes import QueueLimit
from tests.conftest import unique_prefix
from tests.engine.test_script_bounds import JOBS, Counted, _judge
from tests.engine.test_script_bounds import watched as watched  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.script_bounds]


BATCH = 100


def _enqueue(e: Counted, now: int) -> None:
    for start in range(0, JOBS, scripts.MAX_ENQUEUE):
        ids = range(start, start + scripts.MAX_ENQUEUE)
        jobs = [NewJob(id="b%06d" % i, at_ms=now - JOBS + i, priority=i % 3,
                       group="heavy" if i % 2 else "g%d" % (i % 10_000)) for i in ids]
        e.enqueue("q", jobs, now_ms=now - JOBS - 1 if start < JOBS // 2 else now)


def test_no_script_over_5ms_draining_100k_jobs_of_10_001_groups(
        redis_server, watched) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    e = Counted(Engine(redis_server.client(), prefix=unique_prefix()))
    now = 1_800_000_000_000
    _enqueue(e, now)
    started, claimed, rounds = time.monotonic(), 0, 0
    while True:
        jobs = e.claim("q", BATCH, 60_000, now_ms=now).jobs
        if not jobs:
            break
        claimed += len(jobs)
        rounds += 1
        if rounds % 10 == 0:
            e.nack("q", [(jobs[0].id, jobs[0].token, 0)], now_ms=now)  # back, due now
            e.release("q", jobs[1:2], now_ms=now)
            e.cancel("q", "b%06d" % (JOBS - 1 - rounds))
            jobs = jobs[2:]
        e.ack("q", [(j.id, j.token) for j in jobs], now_ms=now)
    print(_judge(watched, e.calls))
    print("claimed %d in %d claims, %.1fs" % (claimed, rounds, time.monotonic() - started))
    k = e.engine.keys("q")
    assert e.engine.stats("q", now_ms=now).ready == 0
    assert not e.engine.client.exists(k.group_ready, k.group_turns)


LIMITED_ROUNDS = 3000  # claims of 100 asked (25 leased at most), 2 ms of Redis clock apart


def test_no_script_over_5ms_claiming_100k_jobs_of_10_001_limited_groups(
        redis_server, watched) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    e = Counted(Engine(redis_server.client(), prefix=unique_prefix()))
    now = 1_800_000_000_000
    e.set_queue_limit("q", rate=None, concurrency=None,
                      groups=QueueLimit(rate=(5, 1000), concurrency=3))
    e.set_group_limit("q", "heavy", rate=(2000, 1000), concurrency=20)
    _enqueue(e, now)
    started, claimed, limited, running = time.monotonic(), 0, 0, []
    for _ in range(LIMITED_ROUNDS):
        got = e.claim("q", BATCH, 60_000, now_ms=now)
        claimed, limited = claimed + len(got.jobs), limited + got.limited
        e.ack("q", [(j.id, j.token) for j in running], now_ms=now)  # a round later
        running = got.jobs
        now += 2
    e.ack("q", [(j.id, j.token) for j in running], now_ms=now)
    print(_judge(watched, e.calls))
    print("claimed %d in %d claims (%d limited), %.1fs" % (
        claimed, LIMITED_ROUNDS, limited, time.monotonic() - started))
    assert claimed > 10 * LIMITED_ROUNDS and limited > LIMITED_ROUNDS // 10
    assert e.engine.group_slots("q") == {}


def test_the_grouped_caps_are_the_scripts_own() -> None:
    """scripts.MAX_TURNS and MAX_GROUP_PROMOTE state claim.lua's TURNS and GROUP_PROMOTE
    (the worker's batching and the docs go by them), and a grouped claim promotes
    GROUP_PROMOTE of the urgent index too."""
    claim = scripts._read("claim")
    assert f"local TURNS, SKIPS, ROUNDS, HEAD = {scripts.MAX_TURNS}," in claim
    assert f"local GROUP_PROMOTE = {scripts.MAX_GROUP_PROMOTE} " in claim
    assert "grant, PROMOTE, URGENT = 0, GROUP_PROMOTE, GROUP_PROMOTE" in claim
