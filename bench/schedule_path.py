#!/usr/bin/env python
"""schedule() path: jobs/s one at a time (autocommit, as a view does; and in one
transaction, a loop in a view), schedule_many jobs/s, and Redis bytes per pending job.

    python bench/schedule_path.py [-n 5000] [--memory 100000] [--db sqlite|postgres] [--json]
                                  [--floors] [--repeat 1]

Starts its own redis-server (free port, no persistence); SQLite in a temporary directory
or PostgreSQL (127.0.0.1:5432; its own database ``delayq_bench_schedule``, created fresh).
Every job writes its audit row (bench_settings: EVENTS on, as by default). Bytes per job
are the ``INFO memory`` ``used_memory`` delta over ``--memory`` pending jobs after FLUSHDB
(due in one hour), with ``MEMORY USAGE`` of each key the jobs created.

``--floors`` measures what no ``schedule()`` can beat on this machine, ``-n`` times each:
a bare autocommit INSERT of a job's row through Django's cursor (the prepared statement of
``core/row_insert.py``, values prepared once; on SQLite with ``synchronous`` FULL, the test
settings' WAL default, and NORMAL, the benchmark's), and a bare Redis round trip
(``EVALSHA`` of ``return 1``). ``--repeat R`` reports the best of R rounds of each figure
(a loaded machine). The script runs unchanged on trees since ``core/row_insert.py``, so
it measures a "before" tree too (a tree that has a background sender sends inline, its
default).
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


def _loops(n: int, repeat: int) -> tuple[float, float, float, float]:
    """The best jobs/s of ``repeat`` rounds of ``n`` calls in autocommit, and of ``n``
    calls in one transaction (each job in Redis when the call or the block returns); the least
    CPU time of this process per job (µs) of each (less sensitive to a busy machine)."""
    from django.db import transaction

    from django_delayq import schedule

    auto = one_tx = 0.0
    auto_cpu = tx_cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            schedule("bench_jobs.noop", i, delay=3600)
        auto = max(auto, n / (time.perf_counter() - t0))
        auto_cpu = min(auto_cpu, (time.process_time() - c0) / n * 1e6)
        t0, c0 = time.perf_counter(), time.process_time()
        with transaction.atomic():
            for i in range(n):
                schedule("bench_jobs.noop", i, delay=3600)
        one_tx = max(one_tx, n / (time.perf_counter() - t0))
        tx_cpu = min(tx_cpu, (time.process_time() - c0) / n * 1e6)
    return auto, one_tx, auto_cpu, tx_cpu


def rates(n: int, repeat: int = 1) -> dict[str, float]:
    from django_delayq import schedule
    from django_delayq.core.api import JobSpec, schedule_many

    for i in range(200):  # warm-up: scripts loaded, connections open
        schedule("bench_jobs.noop", i, delay=3600)
    auto, one_tx, auto_cpu, tx_cpu = _loops(n, repeat)
    many = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        schedule_many("bench_jobs.noop", [JobSpec(args=[i], delay=3600) for i in range(n)])
        many = max(many, n / (time.perf_counter() - t0))
    return {"schedule_autocommit_jobs_per_s": round(auto),
            "schedule_one_transaction_jobs_per_s": round(one_tx),
            "schedule_autocommit_cpu_us_per_job": round(auto_cpu),
            "schedule_one_transaction_cpu_us_per_job": round(tx_cpu),
            "schedule_many_jobs_per_s": round(many)}


def _per_s(n: int, step: Any, repeat: int = 1) -> int:
    best = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        for i in range(n):
            step(i)
        best = max(best, n / (time.perf_counter() - t0))
    return round(best)


def floors(n: int, repeat: int = 1) -> dict[str, int]:
    """Bare autocommit INSERTs of a job's row and bare Redis round trips, per second."""
    from django.db import connection
    from django.utils import timezone

    from django_delayq.core import ids, row_insert
    from django_delayq.core.connection import get_engine
    from django_delayq.models import Job

    sql = row_insert._statement("default").sql
    now = timezone.now()
    row = Job(id=ids.new_id(), queue="default", callable_path="bench_jobs.noop", args=[1],
              kwargs={}, run_at=now, scheduled_for=now, max_attempts=3)
    params = row_insert.params(row, "default")

    def insert(i: int) -> None:
        params[0] = ids.new_id()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)

    out: dict[str, int] = {}
    modes = ["FULL", "NORMAL"] if connection.vendor == "sqlite" else [""]
    for mode in modes:
        if mode:
            connection.cursor().execute("PRAGMA synchronous=%s" % mode)
        _per_s(200, insert)
        name = "insert_autocommit%s_per_s" % ("_" + mode.lower() if mode else "")
        out[name] = _per_s(n, insert, repeat)
    client = get_engine().client
    sha = client.script_load("return 1")
    out["redis_evalsha_round_trips_per_s"] = _per_s(n, lambda i: client.evalsha(sha, 0),
                                                        repeat)
    return out


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
    p.add_argument("--floors", action="store_true", help="bare INSERT and Redis round trips")
    p.add_argument("--repeat", type=int, default=1, help="best of this many rounds")
    opts = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="delayq-schedule-"))
    redis_proc, url = start_redis(workdir)
    os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir), BENCH_DB=opts.db)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")
    try:
        setup(opts.db)
        out: dict[str, Any] = {"db": opts.db, "load": os.getloadavg()[0]}
        if opts.floors:
            out.update(floors(opts.n or 5000, opts.repeat))
            opts.n = opts.memory = 0
        if opts.n:
            out.update(rates(opts.n, opts.repeat))
        if opts.memory:
            out.update(memory(opts.memory))
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    print(json.dumps(out) if opts.json else json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
