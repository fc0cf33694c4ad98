#!/usr/bin/env python
"""Fairness among groups, measured (docs/groups.md): one heavy group of --heavy due jobs,
then --light groups of --each jobs each, scheduled after it, all no-op jobs due at once;
one worker process of --concurrency threads drains them. Prints the light jobs' waits
(their start minus the drain's first start, from the audit rows: p50, p99, max; all were
due before it), each light group's first start,
and the drain throughput, then the same jobs without groups for comparison.

    python bench/groups_fair.py [--heavy 100000] [--light 100] [--each 10] [--concurrency 4]

Its own redis-server and SQLite database (bench/foundation.py's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from foundation import open_bench, pct, reset, worker  # noqa: E402


def run(heavy: int, light: int, each: int, concurrency: int, grouped: bool) -> dict[str, float]:
    from django.db.models import Max, Min

    from django_delayq.core.api import JobSpec, schedule_many
    from django_delayq.models import Job

    reset()
    schedule_many("bench_jobs.noop", [JobSpec(args=[i]) for i in range(heavy)],
                  group="heavy" if grouped else None)
    for g in range(light):
        schedule_many("bench_jobs.noop", [JobSpec(args=[g, i]) for i in range(each)],
                      group="light-%d" % g if grouped else None, queue="default")
    light_ids = set(Job.objects.order_by("-created_at", "-id").values_list("id", flat=True)
                    [:light * each])
    t0 = time.perf_counter()
    worker("--burst", "--concurrency", str(concurrency)).wait()
    wall = time.perf_counter() - t0
    rows = Job.objects.filter(status="succeeded")
    agg = rows.aggregate(first=Min("started_at"), last=Max("finished_at"))
    span = (agg["last"] - agg["first"]).total_seconds()
    waits, firsts = [], {}
    for job_id, started, args in rows.values_list("id", "started_at", "args"):
        if job_id in light_ids:  # from the drain's first start: the worker's start-up aside
            wait = (started - agg["first"]).total_seconds()
            waits.append(wait)
            firsts[args[0]] = min(firsts.get(args[0], wait), wait)
    return {"jobs": rows.count(), "jobs_per_s": round(rows.count() / span),
            "wall_s": round(wall, 1), "light_wait_p50_s": round(statistics.median(waits), 3),
            "light_wait_p99_s": round(pct(waits, 99), 3), "light_wait_max_s": round(max(waits), 3),
            "light_first_start_max_s": round(max(firsts.values()), 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heavy", type=int, default=100_000)
    p.add_argument("--light", type=int, default=100)
    p.add_argument("--each", type=int, default=10)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--rounds", type=int, default=1,
                   help="grouped and ungrouped drains in turns, the first one alternating "
                        "(a machine whose load changes favours neither)")
    a = p.parse_args()
    print("load average before:", " ".join("%.2f" % x for x in os.getloadavg()))
    redis_proc = open_bench("sqlite")
    try:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        for i in range(a.rounds):
            for grouped in ((True, False) if i % 2 == 0 else (False, True)):
                figures = run(a.heavy, a.light, a.each, a.concurrency, grouped)
                print("grouped" if grouped else "ungrouped", figures)
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    print("load average after:", " ".join("%.2f" % x for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
