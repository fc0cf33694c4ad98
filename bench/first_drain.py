#!/usr/bin/env python
"""First drain on a fresh Redis against a warm one: where a worker's start-up time goes.

    python bench/first_drain.py [--jobs 20000] [--rounds 3] [--concurrency 4]

Starts its own redis-server (free port, no persistence) and SQLite database, like
``foundation.py``. Each round: a fresh Redis (FLUSHALL and SCRIPT FLUSH: no epoch, no
scripts cached), ``--jobs`` no-op jobs scheduled, a ``delayq_worker --burst`` drains
them; then the same again on the now warm Redis (epoch, scripts and keys in place). For
each drain it prints jobs/s from the audit rows (first start to last finish), the
process's wall time and the time from process start to the first job start (start-up).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import foundation  # noqa: E402 - bench/foundation.py: Redis and worker helpers


def drain(n: int, concurrency: int, fresh: bool) -> dict[str, float]:
    from django.db.models import Max, Min

    from django_delayq.core.api import JobSpec, schedule_many
    from django_delayq.core.connection import get_engine
    from django_delayq.models import Job, JobAttempt

    client = get_engine().client
    if fresh:
        client.flushall()
        client.script_flush()
    JobAttempt.objects.all().delete()
    Job.objects.all().delete()
    schedule_many("bench_jobs.noop", [JobSpec(args=[i]) for i in range(n)])
    t0 = time.time()
    foundation.worker("--burst", "--concurrency", str(concurrency)).wait()
    wall = time.time() - t0
    done = Job.objects.filter(status="succeeded")
    agg = done.aggregate(first=Min("started_at"), last=Max("finished_at"))
    span = (agg["last"] - agg["first"]).total_seconds()
    return {"jobs_per_s": done.count() / span, "wall_s": wall,
            "startup_s": agg["first"].timestamp() - t0, "jobs": done.count()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=4)
    opts = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="delayq-first-drain-"))
    redis_proc, url = foundation.start_redis(workdir)
    os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir),
                      DJANGO_SETTINGS_MODULE="bench_settings")
    results: dict[str, list[dict[str, float]]] = {"fresh": [], "warm": []}
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        for _ in range(opts.rounds):
            for kind in ("fresh", "warm"):
                r = drain(opts.jobs, opts.concurrency, kind == "fresh")
                results[kind].append(r)
                print("%-5s %6d jobs/s  start-up %.2f s  wall %.2f s  (%d jobs)" % (
                    kind, r["jobs_per_s"], r["startup_s"], r["wall_s"], r["jobs"]), flush=True)
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    for kind, rs in results.items():
        print("%s: median %d jobs/s, start-up %.2f s, wall %.2f s" % (
            kind, statistics.median(r["jobs_per_s"] for r in rs),
            statistics.median(r["startup_s"] for r in rs),
            statistics.median(r["wall_s"] for r in rs)))
    print("load average: %.2f %.2f %.2f (%d cpus)" % (*os.getloadavg(), os.cpu_count() or 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
