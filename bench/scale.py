#!/usr/bin/env python
"""Flat at 1M: enqueue, claim and cancel latency with 10k, 100k and 1M pending jobs, and
Redis bytes per pending job.

    python bench/scale.py [--sizes 10000,100000,1000000] [--calls 2000] [--json]

(``make bench-scale``.) Starts its own redis-server (free port, no persistence) and a
SQLite database in a temporary directory (bench_settings, audit rows on). The backlog
grows in place from one size to the next with ``Engine.enqueue`` in batches of 10,000
(jobs due in 1-2 h, no payload in Redis, as ``schedule()`` leaves them). At each size,
one call at a time, ``--calls`` times each:

- ``enqueue``: ``Engine.enqueue`` of one job due in 1-2 h;
- ``schedule()``: the public call in autocommit (audit row INSERT + the enqueue script);
- ``claim``: one due job enqueued (untimed), then ``Engine.claim(limit=1)`` timed, then
  acked (untimed), so the claim always finds exactly one due job behind the backlog;
- ``cancel``: ``Engine.cancel`` of a random pending job (the enqueues put as many back).

Bytes per pending job: ``INFO memory`` ``used_memory`` delta over the jobs added to reach
the size, divided by their number. Prints one table, the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from foundation import pct, start_redis  # noqa: E402

Q = "default"
FILL_BATCH = 10_000
HOUR_MS = 3_600_000


def setup_django(url: str, workdir: Path) -> None:
    os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir),
                      DJANGO_SETTINGS_MODULE="bench_settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def fill(engine: Any, n: int) -> float:
    """Add ``n`` pending jobs due in 1-2 h; returns jobs/s."""
    from django_delayq.core.ids import new_id
    from django_delayq.engine import NewJob

    now = engine.time_ms()
    t0 = time.perf_counter()
    for start in range(0, n, FILL_BATCH):
        engine.enqueue(Q, [NewJob(id=new_id(), at_ms=now + HOUR_MS + random.randrange(HOUR_MS))
                           for _ in range(min(FILL_BATCH, n - start))])
    return n / (time.perf_counter() - t0)


def timed(samples: list[float], call: Callable[[], Any]) -> Any:
    t0 = time.perf_counter()
    out = call()
    samples.append((time.perf_counter() - t0) * 1e6)
    return out


def measure(engine: Any, calls: int) -> dict[str, list[float]]:
    from django_delayq import schedule
    from django_delayq.core.ids import new_id
    from django_delayq.engine import NewJob

    s: dict[str, list[float]] = {"enqueue": [], "schedule()": [], "claim": [], "cancel": []}
    victims = [v.decode() for v in engine.client.zrandmember(engine.keys(Q).pending, calls)]
    now = engine.time_ms()
    for i in range(calls):
        job = NewJob(id=new_id(), at_ms=now + HOUR_MS + random.randrange(HOUR_MS))
        timed(s["enqueue"], partial(engine.enqueue, Q, [job]))
        timed(s["schedule()"], partial(schedule, "bench_jobs.noop", i, delay=5400))
        engine.enqueue(Q, [NewJob(id=new_id(), at_ms=engine.time_ms() - 1)])
        got = timed(s["claim"], lambda: engine.claim(Q, 1, 60_000)).jobs
        engine.ack(Q, [(j.id, j.token) for j in got])
        victim = victims[i % len(victims)]
        timed(s["cancel"], partial(engine.cancel, Q, victim))
    return s


def used_memory(engine: Any) -> int:
    return int(engine.client.info("memory")["used_memory"])


def run(sizes: list[int], calls: int) -> list[dict[str, Any]]:
    from django_delayq import schedule
    from django_delayq.core.connection import get_engine

    engine = get_engine()
    for i in range(200):  # warm-up: scripts loaded, connections open, queue registered
        schedule("bench_jobs.noop", i, delay=5400)
    rows: list[dict[str, Any]] = []
    have = engine.stats(Q).scheduled
    for size in sizes:
        before = used_memory(engine)
        rate = fill(engine, size - have)
        added = size - have
        per_job = (used_memory(engine) - before) / added
        samples = measure(engine, calls)
        have = engine.stats(Q).scheduled
        row: dict[str, Any] = {"pending": have, "fill_jobs_per_s": round(rate),
                               "bytes_per_job": round(per_job, 1)}
        for name, v in samples.items():
            row[name] = {"p50_us": round(pct(v, 50)), "p99_us": round(pct(v, 99)),
                         "max_us": round(max(v))}
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    names = ("enqueue", "schedule()", "claim", "cancel")
    head = "| pending | " + " | ".join("%s p50 / p99 µs" % n for n in names) + " | B/job |"
    out = [head, "|" + "---|" * (len(names) + 2)]
    for r in rows:
        cells = ["%d / %d" % (r[n]["p50_us"], r[n]["p99_us"]) for n in names]
        out.append("| {:,} | ".format(r["pending"]) + " | ".join(cells)
                   + " | %.1f |" % r["bytes_per_job"])
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--json", action="store_true")
    opts = p.parse_args()
    sizes = sorted(int(x) for x in opts.sizes.split(",") if x)
    workdir = Path(tempfile.mkdtemp(prefix="delayq-scale-"))
    proc, url = start_redis(workdir)
    load_before = os.getloadavg()
    try:
        setup_django(url, workdir)
        rows = run(sizes, opts.calls)
    finally:
        proc.terminate()
        proc.wait()
    load_after = os.getloadavg()
    if opts.json:
        print(json.dumps({"rows": rows, "load_before": load_before, "load_after": load_after}))
        return 0
    print(table(rows))
    print("\nfill rate (Engine.enqueue, %d per call): %s jobs/s"
          % (FILL_BATCH, ", ".join("{:,}".format(r["fill_jobs_per_s"]) for r in rows)))
    print("max µs: " + "; ".join("{:,}: ".format(r["pending"]) + ", ".join(
        "%s %d" % (n, r[n]["max_us"]) for n in ("enqueue", "schedule()", "claim", "cancel"))
        for r in rows))
    print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f (%d CPUs)"
          % (*load_before, *load_after, os.cpu_count() or 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
