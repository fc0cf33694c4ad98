#!/usr/bin/env python
"""Drain throughput of atomic jobs next to the same jobs without the option.

    python bench/atomic_drain.py [--jobs 10000] [--concurrency 4] [--runs 1]
                                 [--db sqlite|postgres] [--kinds noop,write]

Starts its own redis-server (free port, no persistence) and database (as
``bench/foundation.py``), schedules ``--jobs`` jobs with ``schedule_many`` and drains them
with one real ``manage.py delayq_worker --burst`` subprocess, audit rows on, once with
``atomic=False`` and once with ``atomic=True``, for each kind of job:

* ``noop``: ``bench_jobs.noop``, nothing to write: the option's own cost (one primary-key
  read, the transaction, one conditional UPDATE);
* ``write``: ``tests.jobs_atomic.bump``, one UPDATE of one of 16 counter rows and one
  INSERT, the kind of job the option is for.

Jobs/s is the number of succeeded rows over first start to last finish, read from the
rows; the 1-minute load average is printed before and after (``uptime``'s figures).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from foundation import reset, start_redis, worker  # noqa: E402

COUNTERS = tuple("c%d" % i for i in range(16))
JOBS = {"noop": "bench_jobs.noop", "write": "tests.jobs_atomic.bump"}


PG_NAME = "delayq_atomic_bench_%d" % os.getpid()


def pg_database(create: bool) -> None:
    """A PostgreSQL database of this run's own (127.0.0.1:5432), created or dropped."""
    import psycopg

    with psycopg.connect(host="127.0.0.1", dbname="postgres", autocommit=True,
                         user=os.environ.get("PGUSER", "postgres")) as conn:
        conn.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % PG_NAME)
        if create:
            conn.execute("CREATE DATABASE %s" % PG_NAME)


def open_bench(db: str) -> subprocess.Popen[bytes]:
    """``foundation.open_bench`` with the atomic jobs allowed (and, on PostgreSQL, a
    database of its own)."""
    workdir = Path(tempfile.mkdtemp(prefix="delayq-bench-"))
    redis_proc, url = start_redis(workdir)
    if db == "postgres":
        pg_database(create=True)
    os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir), BENCH_DB=db,
                      BENCH_PGDATABASE=PG_NAME, DJANGO_SETTINGS_MODULE="atomic_bench_settings")
    import django

    django.setup()
    return redis_proc


def drain(kind: str, atomic: bool, n: int, concurrency: int) -> tuple[float, float]:
    """(jobs/s from the rows, the worker process's wall time)."""
    from django.db.models import Max, Min

    from django_delayq import JobSpec, schedule_many
    from django_delayq.models import Job
    from tests import jobs_atomic

    reset()
    jobs_atomic.create_tables(COUNTERS)
    args = (lambda i: [i]) if kind == "noop" else (lambda i: [COUNTERS[i % len(COUNTERS)]])
    schedule_many(JOBS[kind], [JobSpec(args=args(i)) for i in range(n)], atomic=atomic)
    t0 = time.perf_counter()
    worker("--burst", "--concurrency", str(concurrency)).wait()
    wall = time.perf_counter() - t0
    done = Job.objects.filter(status="succeeded")
    count = done.count()
    if count != n:
        raise SystemExit("%s atomic=%s: %d of %d jobs succeeded" % (kind, atomic, count, n))
    if kind == "write" and sum(jobs_atomic.counters().values()) != n:
        raise SystemExit("write atomic=%s: the counters do not add up to %d" % (atomic, n))
    agg = done.aggregate(first=Min("started_at"), last=Max("finished_at"))
    return count / (agg["last"] - agg["first"]).total_seconds(), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--kinds", default="noop,write")
    opts = parser.parse_args()
    kinds = [k for k in opts.kinds.split(",") if k]
    redis_proc = open_bench(opts.db)
    print("%s, %d jobs, --concurrency %d; load average before: %.2f %.2f %.2f (%d cpus)"
          % (opts.db, opts.jobs, opts.concurrency, *os.getloadavg(), os.cpu_count() or 0))
    try:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        print("%-6s %-8s %s" % ("job", "atomic", "jobs/s (worker wall s), per run"))
        for kind in kinds:
            for atomic in (False, True):
                runs = [drain(kind, atomic, opts.jobs, opts.concurrency)
                        for _ in range(opts.runs)]
                print("%-6s %-8s %s" % (kind, atomic, " · ".join(
                    "%s (%.1f)" % (format(round(rate), ","), wall) for rate, wall in runs)),
                      flush=True)
    finally:
        redis_proc.terminate()
        redis_proc.wait()
        if opts.db == "postgres":
            from django.db import connections

            connections.close_all()
            pg_database(create=False)
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main())
