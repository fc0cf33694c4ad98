#!/usr/bin/env python
"""claim.lua's own time (Redis-side, SLOWLOG) at its worst case: the 5 ms bound's margin.

    python bench/claim_cost.py [--jobs 100000] [--claims 300] [--batch N] [--ready] [--json]

Starts its own redis-server (free port, no persistence; real-time priority where
permitted, as tests/engine/test_script_bounds.py runs it) and uses ``Engine`` directly.
``--jobs`` jobs of priorities -3..3 come due one ms apart until now, enqueued before they
were due, so every claim promotes ``scripts.MAX_PROMOTE`` of them from pending besides
leasing ``--batch`` (default ``scripts.MAX_CLAIM``); the queue has a rate and a
concurrency limit (so each lease also writes the window log). ``--ready``: the jobs are
enqueued due (all in ready: claims lease only). Each claim's batch is acked a claim
later. Prints the claim's p50 / p99 / max in µs and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from foundation import pct, start_redis  # noqa: E402

from django_delayq.engine import ClaimedJob, Engine, NewJob, scripts  # noqa: E402

NOW = 1_800_000_000_000


def fill(engine: Engine, n: int, ready: bool) -> None:
    for start in range(0, n, scripts.MAX_ENQUEUE):
        batch = [NewJob(id="b%07d" % i, at_ms=NOW - n + i, priority=i % 7 - 3)
                 for i in range(start, min(n, start + scripts.MAX_ENQUEUE))]
        engine.enqueue("q", batch, now_ms=NOW if ready else NOW - n - 1)


def measure(engine: Engine, claims: int, batch: int) -> list[int]:
    client, sha = engine.client, scripts.load("claim").sha.encode()
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 100)
    durations: list[int] = []
    held: list[ClaimedJob] = []
    for _ in range(claims):
        client.slowlog_reset()
        got = engine.claim("q", batch, 60_000, now_ms=NOW).jobs
        durations += [e["duration"] for e in client.slowlog_get(100)
                      if sha in (e["command"] or b"")[:60]]
        engine.ack("q", [(j.id, j.token) for j in held])
        held = got
    return durations


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--claims", type=int, default=300)
    p.add_argument("--batch", type=int, default=scripts.MAX_CLAIM)
    p.add_argument("--ready", action="store_true", help="all jobs in ready: lease only")
    p.add_argument("--json", action="store_true")
    opts = p.parse_args()
    import redis

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_redis(Path(tmp))
        try:
            try:
                os.sched_setscheduler(proc.pid, os.SCHED_FIFO, os.sched_param(1))
                how = "SCHED_FIFO"
            except PermissionError:
                how = "normal scheduling"
            engine = Engine(redis.Redis.from_url(url), prefix="bench")
            fill(engine, opts.jobs, opts.ready)
            engine.set_queue_limit("q", rate=(10**9, 3_600_000), concurrency=10**9)
            us = measure(engine, opts.claims, opts.batch)
        finally:
            proc.kill()
            proc.wait()
    result = {"jobs": opts.jobs, "where": "ready" if opts.ready else "pending (promoted)",
              "batch": opts.batch, "max_promote": scripts.MAX_PROMOTE, "claims": len(us),
              "p50_us": pct(us, 50), "p99_us": pct(us, 99), "max_us": max(us),
              "redis": how, "load": os.getloadavg()[0]}
    if opts.json:
        print(json.dumps(result))
    else:
        print("claim of %(batch)d, %(jobs)d due jobs in %(where)s (%(claims)d claims, %(redis)s,"
              " load %(load).2f): p50 %(p50_us)d us, p99 %(p99_us)d us, max %(max_us)d us"
              % result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
