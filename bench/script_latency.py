#!/usr/bin/env python
"""Worst Lua script latency with a big backlog, and a 1,000,000-job due backlog drained
at full speed while a separate process PINGs Redis.

    python bench/script_latency.py [--sizes 10000,1000000] [--drain 1000000] [--json]
                                   [--redis redis://...]   (default: a private redis-server)

Uses ``Engine`` directly (no Django). For each size, the pending ZSET is filled with
pipelined ``enqueue`` calls (1,000 jobs per call, due in 1-2 h), then every script is
called ``--calls`` times and timed one call at a time: client round trip (p50/p99/max)
and Redis's own duration from SLOWLOG (every script call over 1 ms is logged there).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from django_delayq.core.ids import new_id  # noqa: E402
from django_delayq.engine import (  # noqa: E402
    Engine,
    NewJob,
    scripts,  # noqa: E402
)

Q = "default"
SLOW_US = 1000


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def envelope(i: int) -> str:
    """What django-delayq sends: no envelope (Redis holds ids, the payload is the row)."""
    return ""


def fill(engine: Engine, n: int, due_from_ms: int, due_span_ms: int, per_call: int = 1000,
         calls_per_pipe: int = 10) -> float:
    """Add ``n`` jobs due in [due_from, due_from + span) with pipelined enqueue calls."""
    k = engine.keys(Q)
    script = scripts.load("enqueue")
    engine.enqueue(Q, [NewJob(id=new_id(), envelope=envelope(0), at_ms=due_from_ms)])
    t0 = time.perf_counter()
    done = 0
    while done < n:
        pipe = engine.client.pipeline(transaction=False)
        for _ in range(calls_per_pipe):
            size = min(per_call, n - done)
            if size <= 0:
                break
            args: list[Any] = [0, k.channel]
            for i in range(done, done + size):
                args += [new_id(), due_from_ms + random.randrange(due_span_ms), 0, envelope(i),
                         0, ""]
            pipe.evalsha(script.sha, len(script.keys_of(k)), *script.keys_of(k), *args)
            done += size
        pipe.execute()
    return n / (time.perf_counter() - t0)


def flush(client: Any) -> None:
    """FLUSHDB ASYNC (a synchronous flush of 1M jobs outlasts the client's socket timeout),
    then wait for the background free to end so it does not disturb the timings."""
    client.flushdb(asynchronous=True)
    while int(client.info("memory").get("lazyfree_pending_objects", 0)):
        time.sleep(0.1)


def timed(samples: dict[str, list[float]], name: str, call: Callable[[], Any]) -> Any:
    t0 = time.perf_counter()
    out = call()
    samples.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
    return out


def exercise(engine: Engine, calls: int) -> dict[str, list[float]]:
    """Call every script ``calls`` times against the current backlog."""
    samples: dict[str, list[float]] = {}
    now = engine.time_ms()
    pending = [v.decode() for v in engine.client.zrandmember(engine.keys(Q).pending, calls)]
    for i in range(calls):
        job = NewJob(id=new_id(), envelope=envelope(i), delay_ms=3_600_000 + i)
        timed(samples, "enqueue x1", lambda: engine.enqueue(Q, [job]))
        if i % 20 == 0:
            # as many due jobs as a claim takes (scripts.MAX_CLAIM): none pile up in ready
            batch = [NewJob(id=new_id(), envelope=envelope(j), at_ms=now - 1)
                     for j in range(scripts.MAX_CLAIM)]
            timed(samples, "enqueue x%d" % len(batch), lambda: engine.enqueue(Q, batch))
            got = timed(samples, "claim %d" % len(batch),
                        lambda: engine.claim(Q, len(batch), 60_000)).jobs
            leases = [(j.id, j.token) for j in got]
            timed(samples, "extend %d" % len(leases), lambda: engine.extend(Q, leases, 60_000))
            half = len(leases) // 2
            timed(samples, "ack %d" % half, lambda: engine.ack(Q, leases[:half]))
            fails = [(jid, tok, 3_600_000) for jid, tok in leases[half:]]
            timed(samples, "nack %d" % len(fails), lambda: engine.nack(Q, fails))
        victim = pending[i % len(pending)] if pending else job.id
        timed(samples, "reschedule", lambda: engine.reschedule(Q, victim, delay_ms=7_200_000))
        timed(samples, "inspect", lambda: engine.inspect(Q, victim))
        timed(samples, "stats", lambda: engine.stats(Q))
        timed(samples, "recover", lambda: engine.recover(Q))
        timed(samples, "cancel", lambda: engine.cancel(Q, job.id))
    return samples


def slowlog(client: Any) -> list[tuple[int, str]]:
    """(microseconds, command) of every logged call, then reset the log."""
    out = [(int(e["duration"]), (e["command"] or b"")[:60].decode(errors="replace"))
           for e in client.slowlog_get(1024)]
    client.slowlog_reset()
    return out


def summarize(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {name: {"calls": len(v), "p50_ms": round(pct(v, 50), 3), "p99_ms": round(pct(v, 99), 3),
                   "max_ms": round(max(v), 3)} for name, v in samples.items()}


def latency_at(engine: Engine, size: int, calls: int) -> dict[str, Any]:
    client = engine.client
    flush(client)
    rate = fill(engine, size, engine.time_ms() + 3_600_000, 3_600_000)
    slowlog(client)
    samples = exercise(engine, calls)
    slow = slowlog(client)
    scripts_over = [us for us, cmd in slow if cmd.upper().startswith(("EVALSHA", "EVAL"))]
    every = [v for values in samples.values() for v in values]
    return {"pending": size, "fill_jobs_per_s": round(rate),
            "client_p99_ms": round(pct(every, 99), 3), "client_max_ms": round(max(every), 3),
            "redis_max_script_ms": round(max(scripts_over, default=0) / 1000, 3),
            "redis_scripts_over_1ms": len(scripts_over), "per_script": summarize(samples)}


def ping_loop(url: str, stop: Any, out: Any) -> None:
    import redis

    client = redis.Redis.from_url(url)
    lat: list[float] = []
    while not stop.is_set():
        t0 = time.perf_counter()
        client.ping()
        lat.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.001)
    out.put({"pings": len(lat), "ping_p99_ms": round(pct(lat, 99), 3),
             "ping_max_ms": round(max(lat), 3)})


def drain_backlog(engine: Engine, url: str, size: int, batch: int) -> dict[str, Any]:
    """``size`` due jobs, claimed ``batch`` at a time and acked, as fast as one client can."""
    client = engine.client
    flush(client)
    fill(engine, size, engine.time_ms() - 3_600_000, 3_600_000)
    client.config_set("latency-monitor-threshold", 1)
    client.execute_command("LATENCY", "RESET")
    slowlog(client)
    stop, out = multiprocessing.Event(), multiprocessing.Queue()
    pinger = multiprocessing.Process(target=ping_loop, args=(url, stop, out), daemon=True)
    pinger.start()
    t0, done, worst = time.perf_counter(), 0, 0.0
    while True:
        c0 = time.perf_counter()
        got = engine.claim(Q, batch, 60_000).jobs
        if not got:
            break
        engine.ack(Q, [(j.id, j.token) for j in got])
        worst = max(worst, (time.perf_counter() - c0) * 1000)
        done += len(got)
    wall = time.perf_counter() - t0
    stop.set()
    pings = out.get(timeout=30)
    pinger.join(5)
    slow = slowlog(client)
    events = client.execute_command("LATENCY", "LATEST")
    return {"backlog": size, "drained": done, "claim_batch": batch,
            "jobs_per_s": round(done / wall), "worst_claim_plus_ack_ms": round(worst, 3),
            "redis_max_command_ms": round(max((us for us, _ in slow), default=0) / 1000, 3),
            "redis_slowest": [[round(us / 1000, 3), cmd] for us, cmd in sorted(slow)[-3:]],
            "latency_latest": [[e[0].decode() if isinstance(e[0], bytes) else e[0], *e[1:]]
                               for e in events], **pings}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--redis", help="Redis URL (default: start a private redis-server)")
    p.add_argument("--sizes", default="10000,1000000")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--drain", type=int, default=1_000_000, help="0 skips the backlog drain")
    p.add_argument("--claim-batch", type=int, default=scripts.MAX_CLAIM,
                   help="jobs a drain's claim asks for (default and most: scripts.MAX_CLAIM)")
    p.add_argument("--json", action="store_true")
    opts = p.parse_args()
    import redis

    proc = None
    url = opts.redis
    if url is None:
        from foundation import start_redis

        proc, url = start_redis(Path(tempfile.mkdtemp(prefix="delayq-lat-")))
    try:
        engine = Engine(redis.Redis.from_url(url), prefix="lat")
        engine.client.config_set("slowlog-log-slower-than", SLOW_US)
        engine.client.config_set("slowlog-max-len", 1024)
        result: dict[str, Any] = {"redis_version": engine.client.info("server")["redis_version"],
                                  "sizes": [latency_at(engine, int(s), opts.calls)
                                            for s in opts.sizes.split(",") if s]}
        if opts.drain:
            result["drain"] = drain_backlog(engine, url, opts.drain, opts.claim_batch)
        flush(engine.client)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
    print(json.dumps(result, indent=None if opts.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
