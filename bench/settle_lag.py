#!/usr/bin/env python
"""Finish -> ack: how long a finished job waits for its settlement in Redis, during a drain.

    python bench/settle_lag.py [--jobs 20000] [--concurrency 4] [--db sqlite|postgres]

Starts its own redis-server and database (as bench/foundation.py), schedules ``--jobs``
no-op jobs, drains them with a real worker in this process (``--burst``) and prints the
p50/p99/max of the time from each job's end to its ack (the settler's own measure:
the ack reply's arrival minus the job's finish, same host clock) and the drain rate, with
the machine's load.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from foundation import open_bench, pct, reset  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    opts = parser.parse_args()
    redis_proc = open_bench(opts.db)
    try:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from django_delayq.core.api import JobSpec, schedule_many
        from django_delayq.core.conf import get_settings
        from django_delayq.core.connection import get_engine
        from django_delayq.worker.loop import Worker, WorkerOptions

        reset()
        schedule_many("bench_jobs.noop", [JobSpec(args=[i]) for i in range(opts.jobs)])
        worker = Worker(get_engine(), get_settings(),
                        WorkerOptions(queues=("default",), concurrency=opts.concurrency,
                                      burst=True))
        worker.settlement.settler.lags = deque()
        t0 = time.perf_counter()
        worker.run()
        wall = time.perf_counter() - t0
        lags = list(worker.settlement.settler.lags or ())
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    print("jobs %d, concurrency %d, db %s, load %s" % (
        len(lags), opts.concurrency, opts.db, " ".join("%.2f" % x for x in os.getloadavg())))
    print("finish -> ack ms: p50 %.2f  p99 %.2f  max %.2f" % (
        pct(lags, 50), pct(lags, 99), max(lags)))
    print("drain: %.0f jobs/s (worker wall %.2f s)" % (len(lags) / wall, wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
