"""What a claim costs Redis in a grouped queue (docs/groups.md): 100,000 due jobs spread
over G groups (no group: the plain path), drained by claims of 100; every script call's
time from the SLOWLOG (threshold 0), so the figures are Redis's own, not the round trip.
With --pending the jobs are enqueued before they are due, so every claim promotes. With
--group-limits every group has a concurrency and a rate limit that never bind (1,000 in
flight, 10^9 claims a second): what checking and counting them costs each claim.

    python bench/groups_claim.py [--jobs 100000] [--groups 0 10 100000] [--pending]
                                 [--group-limits]

A private redis-server (the tests' helper) at real-time priority where permitted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from django_delayq.engine import Engine, NewJob, scripts  # noqa: E402
from django_delayq.engine.outcomes import QueueLimit  # noqa: E402
from tests.redis_server import RedisServer, binaries  # noqa: E402

NOW = 1_800_000_000_000


def fill(engine: Engine, jobs: int, groups: int, pending: bool) -> None:
    for start in range(0, jobs, scripts.MAX_ENQUEUE):
        batch = [NewJob(id="j%07d" % i, at_ms=NOW - jobs + i,
                        group="g%d" % (i % groups) if groups else "")
                 for i in range(start, min(jobs, start + scripts.MAX_ENQUEUE))]
        engine.enqueue("q", batch, now_ms=NOW - jobs - 1 if pending else NOW)


def drain(engine: Engine, client, batch: int) -> tuple[list[int], int]:  # type: ignore[no-untyped-def]
    """Claim and ack until empty; returns the claims' SLOWLOG times (µs) and the jobs."""
    claim_sha = scripts.load("claim").sha.encode()
    times: list[int] = []
    claimed = 0
    while True:
        client.slowlog_reset()
        jobs = engine.claim("q", batch, 60_000, now_ms=NOW).jobs
        times += [e["duration"] for e in client.slowlog_get(10) if claim_sha in e["command"][:60]]
        if not jobs:
            return times, claimed
        claimed += len(jobs)
        engine.ack("q", [(j.id, j.token) for j in jobs], now_ms=NOW)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--groups", type=int, nargs="+", default=[0, 10, 100_000])
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--pending", action="store_true",
                   help="enqueue before they are due: every claim promotes (250 a claim)")
    p.add_argument("--group-limits", action="store_true",
                   help="every group limited (never binding): the checks' cost")
    a = p.parse_args()
    print("load average:", " ".join("%.2f" % x for x in os.getloadavg()))
    server = RedisServer(binaries()[0]).start()
    try:
        client = server.client()
        try:
            os.sched_setscheduler(server.proc.pid, os.SCHED_FIFO,  # type: ignore[union-attr]
                                  os.sched_param(1))
        except PermissionError:
            pass
        client.config_set("slowlog-log-slower-than", 0)
        print("%8s %8s %10s %10s %10s %12s" % ("groups", "claims", "p50 µs", "p99 µs", "max µs",
                                              "µs per job"))
        for groups in a.groups:
            client.flushall()
            engine = Engine(client, prefix="bench")
            if a.group_limits:
                engine.set_queue_limit("q", rate=None, concurrency=None, groups=QueueLimit(
                    rate=(10**9, 1000), concurrency=1000))
            fill(engine, a.jobs, groups, a.pending)
            times, claimed = drain(engine, client, a.batch)
            assert claimed == a.jobs, claimed
            q = statistics.quantiles(times, n=100)
            print("%8d %8d %10.0f %10.0f %10d %12.1f" % (
                groups, len(times), statistics.median(times), q[98], max(times),
                sum(times) / claimed))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
