#!/usr/bin/env python
"""schedule() path: jobs/s one at a time (autocommit, as a view does; and in one
transaction, a loop in a view), schedule_many jobs/s, and Redis bytes per pending job.

    python bench/schedule_path.py [-n 5000] [--memory 100000] [--db sqlite|postgres] [--json]

Starts its own redis-server (free port, no persistence); SQLite in a temporary directory
or PostgreSQL (127.0.0.1:5432; its own database ``delayq_bench_schedule``, created fresh).
Every job writes its audit row (bench_settings: EVENTS on, as by default). Bytes per job
are the ``INFO memory`` ``used_memory`` delta over ``--memory`` pending jobs after FLUSHDB
(due in one hour), with ``MEMORY USAGE`` of each key the jobs created.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from foundation import start_redis  # noqa: E402


def rates(n: int) -> dict[str, int]:
    from django.db import transaction

    from django_delayq import schedule
    from django_delayq.core.api import JobSpec, schedule_many

    for i in range(200):  # warm-up: scripts loaded, connections open
        schedule("bench_jobs.noop", i, delay=3600)
    t0 = time.perf_counter()
    for i in range(n):
        schedule("bench_jobs.noop", i, delay=3600)
    auto = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    with transaction.atomic():
        for i in range(n):
            schedule("bench_jobs.noop", i, delay=3600)
    one_tx = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    schedule_many("bench_jobs.noop", [JobSpec(args=[i], delay=3600) for i in range(n)])
    many = n / (time.perf_counter() - t0)
    return {"schedule_autocommit_jobs_per_s": round(auto),
            "schedule_one_transaction_jobs_per_s": round(one_tx),
            "schedule_many_jobs_per_s": round(many)}


def _bytes(n: int, fill: Any) -> dict[str, Any]:
    from django_delayq.core.connection import get_engine

    client = get_engine().client
    client.flushdb()
    before = int(client.info("memory")["used_memory"])
    fill(n)
    used = int(client.info("memory")["used_memory"]) - before
    keys = {k.decode(): int(client.memory_usage(k, samples=0) or 0)
            for k in client.scan_iter(count=1000)}
    return {"bytes_per_job": round(used / n, 1), "keys": keys}


def memory(n: int) -> dict[str, Any]:
    from django.db import transaction

    from django_delayq import schedule
    from django_delayq.core.api import JobSpec, schedule_many

    def single(n: int) -> None:
        for start in range(0, n, 10_000):
            with transaction.atomic():
                for i in range(start, min(n, start + 10_000)):
                    schedule("bench_jobs.noop", 1_795_000_000_000 + i, delay=3600)

    def many(n: int) -> None:
        schedule_many("bench_jobs.noop", [JobSpec(args=[1_795_000_000_000 + i], delay=3600)
                                          for i in range(n)])

    return {"memory_jobs": n, "schedule": _bytes(n, single), "schedule_many": _bytes(n, many)}


def setup(db: str) -> None:
    import django
    from django.core.management import call_command

    if db == "postgres":
        from runtime import fresh_postgres

        os.environ.setdefault("BENCH_PGDATABASE", "delayq_bench_schedule")
        fresh_postgres(os.environ["BENCH_PGDATABASE"])
    django.setup()
    call_command("migrate", run_syncdb=True, verbosity=0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=5000)
    p.add_argument("--memory", type=int, default=100_000)
    p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--json", action="store_true")
    opts = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="delayq-schedule-"))
    redis_proc, url = start_redis(workdir)
    os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir), BENCH_DB=opts.db)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")
    try:
        setup(opts.db)
        out: dict[str, Any] = {"db": opts.db, "load": os.getloadavg()[0]}
        if opts.n:
            out.update(rates(opts.n))
        if opts.memory:
            out.update(memory(opts.memory))
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    print(json.dumps(out) if opts.json else json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
