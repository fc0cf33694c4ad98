"""The enqueue's direct call (engine/direct.py) leaves in Redis what the usual call
(``Script`` through redis-py) leaves, and falls back to it on whatever it cannot serve:
a lost script cache, a key of the wrong type, a connection killed under it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from django_delayq.engine import Engine, NewJob, scripts

NOW = 1_800_000_000_000
JOBS = [NewJob(id="a", at_ms=NOW + 5), NewJob(id="b", at_ms=NOW - 5),
        NewJob(id="c", at_ms=NOW + 9, priority=4, group="g"),
        NewJob(id="d", delay_ms=7, envelope='["x", [], {}, 3, null]')]


def dump(engine: Engine, queue: str) -> dict[str, Any]:
    k, c = engine.keys(queue), engine.client
    return {"pending": c.zrange(k.pending, 0, -1, withscores=True),
            "ready": c.zrange(k.ready, 0, -1, withscores=True),
            "urgent": c.zrange(k.urgent, 0, -1, withscores=True),
            "prio": c.hgetall(k.prio), "group": c.hgetall(k.group),
            "jobs": c.hgetall(k.jobs), "epoch": c.exists(k.epoch)}


def test_the_direct_call_writes_what_the_usual_call_writes(engine: Engine) -> None:
    plain = Engine(engine.client, prefix=engine.prefix + "p")
    plain._direct._pool = None  # the usual call only
    for job in JOBS:
        assert engine.enqueue("q", [job], now_ms=NOW) == plain.enqueue("q", [job], now_ms=NOW)
    assert engine.enqueue("q", JOBS, now_ms=NOW) == plain.enqueue("q", JOBS, now_ms=NOW) == 0
    assert dump(engine, "q") == dump(plain, "q")
    if engine._direct._pool is not None:  # a cluster client has no single pool
        script = scripts.load("enqueue")
        args = [NOW, engine.keys("q").channel, "e", NOW, 0, "", 0, ""]
        assert engine._direct.call(script, script.keys_of(engine.keys("q")), args) == [1, NOW]


def test_what_it_cannot_serve_goes_the_usual_way(engine: Engine) -> None:
    if engine._direct._pool is None:
        pytest.skip("a cluster client: every call goes the usual way")
    k, c = engine.keys("q"), engine.client
    assert engine.enqueue("q", [NewJob(id="a", at_ms=NOW + 1)], now_ms=NOW) == 1
    c.script_flush()  # NOSCRIPT: the usual call sends the script
    assert engine.enqueue("q", [NewJob(id="b", at_ms=NOW + 2)], now_ms=NOW) == 1
    c.zrem(k.pending, "a", "b")
    c.set(k.pending, "planted")  # DELAYQ-WRONGTYPE: the usual call moves the key aside
    assert engine.enqueue("q", [NewJob(id="c", at_ms=NOW + 3)], now_ms=NOW) == 1
    c.client_kill_filter(_type="normal", skipme=False)  # every connection dropped
    assert engine.enqueue("q", [NewJob(id="d", at_ms=NOW + 4)], now_ms=NOW) == 1
    assert engine.enqueue("q", [NewJob(id="e", at_ms=NOW + 5)], now_ms=NOW) == 1
    assert c.zrange(k.pending, 0, -1) == [b"c", b"d", b"e"]


def test_each_thread_calls_on_a_connection_of_its_own(engine: Engine) -> None:
    if engine._direct._pool is None:
        pytest.skip("a cluster client: every call goes the usual way")
    script = scripts.load("enqueue")
    keys = script.keys_of(engine.keys("q"))
    conns, replies = [], []

    def enqueue(job_id: str) -> None:
        args = [NOW, engine.keys("q").channel, job_id, NOW + 1, 0, "", 0, ""]
        replies.append(engine._direct.call(script, keys, args))
        conns.append(engine._direct._mine.conn)

    threads = [threading.Thread(target=enqueue, args=(i,)) for i in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert replies == [[1, NOW], [1, NOW]] and conns[0] is not conns[1]
