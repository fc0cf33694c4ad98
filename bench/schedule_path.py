#!/usr/bin/env python
"""schedule() path: jobs/s one at a time (autocommit, as a view does; and in one
transaction, a loop in a view) next to the floor, schedule_many jobs/s, and Redis bytes
per pending job.

    python bench/schedule_path.py [-n 5000] [--memory 100000] [--db sqlite|postgres] [--json]
                                  [--repeat 1]

Starts its own redis-server (free port, no persistence); SQLite in a temporary directory
(WAL, ``synchronous`` NORMAL: bench_settings) or PostgreSQL (127.0.0.1:5432; its own
database ``delayq_bench_schedule``, created fresh). Every job writes its audit row
(bench_settings: EVENTS on, as by default).

**The floor**, measured in the same run, ``-n`` times each: what no ``schedule()`` can
beat on this machine. One job in autocommit: a bare INSERT of a job's row with its commit
(the prepared statement of ``core/row_insert.py`` through Django's cursor, values
prepared once) plus one Redis round trip (``EVALSHA`` of ``return 1``). One job in one
transaction: the same INSERTs in one transaction, its commit shared, plus a round trip per
``MAX_ENQUEUE`` jobs. ``ratio`` is schedule()'s jobs/s over the floor's.

**CPU per call**: this process's CPU time (user + system, every thread) per
``schedule()``, the writing of its ``scheduled`` events included (each round ends with
``events.flush()``: before, the events of a round's last tick were written after it was
measured, in the next round or in none), the database driver (and on SQLite the
database's own work, in process) and the socket calls; ``python_us_per_call`` is that
minus the floor's CPU per job (the bare INSERT and round trip): what ``schedule()`` adds
in this process above its parts.

**Redis time of the enqueue script** per single-job call: the median SLOWLOG duration of
its ``EVALSHA`` calls (threshold 0) over ``-n`` more autocommit calls, on the private
redis-server (the time Redis spends running the script, not the round trip).

Bytes per job are the ``INFO memory`` ``used_memory`` delta over ``--memory`` pending
jobs after FLUSHDB (due in one hour), with ``MEMORY USAGE`` of each key the jobs created.
``--repeat R`` reports the best of R rounds of each figure (a loaded machine). The script
runs unchanged on trees since ``core/row_insert.py``, so it measures a "before" tree too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from foundation import start_redis  # noqa: E402


def run_calls(n: int, step: Any, one_tx: bool) -> None:
    """``step(i)`` for i in 0..n-1 (in one transaction when ``one_tx``), then the events
    those calls buffered written (``events.flush()``): their cost falls in this loop."""
    from django.db import transaction

    from django_delayq.core import events

    if one_tx:
        with transaction.atomic():
            for i in range(n):
                step(i)
    else:
        for i in range(n):
            step(i)
    events.flush()


@contextlib.contextmanager
def bench_session(prefix: str, db: str, pgdatabase: str) -> Iterator[Path]:
    """A private redis-server and the benchmark's Django (SQLite or a fresh PostgreSQL
    database ``pgdatabase``) for the block; yields the work directory. At the end the
    events still buffered are written while Redis is up, then the server stops."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    redis_proc, url = start_redis(workdir)
    os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir), BENCH_DB=db)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")
    os.environ.setdefault("BENCH_PGDATABASE", pgdatabase)
    try:
        setup(db)
        yield workdir
        from django_delayq.core import events

        events.reset()
    finally:
        redis_proc.terminate()
        redis_proc.wait()


def _timed(n: int, repeat: int, step: Any, one_tx: bool = False) -> tuple[float, float]:
    """The best jobs/s of ``repeat`` rounds of ``n`` calls of ``step(i)`` (in one
    transaction when ``one_tx``), and the least CPU time of this process per call (µs).
    Each round ends by writing the events its calls buffered (``events.flush()``), so
    their cost falls in the round that made them, not in the next one or in none."""
    rate, cpu = 0.0, float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        run_calls(n, step, one_tx)
        rate = max(rate, n / (time.perf_counter() - t0))
        cpu = min(cpu, (time.process_time() - c0) / n * 1e6)
    return rate, cpu


def _schedule(i: int) -> None:
    from django_delayq import schedule

    schedule("bench_jobs.noop", i, delay=3600)


def bare_insert(row: Any, connection: Any) -> tuple[str, list[Any]]:
    """The INSERT of every column of ``row`` and its values as ``save()`` prepares them
    (``get_db_prep_save``): what ``schedule()``'s prepared INSERT sends at most."""
    fields = type(row)._meta.local_concrete_fields
    qn = connection.ops.quote_name
    sql = "INSERT INTO %s (%s) VALUES (%s)" % (
        qn(type(row)._meta.db_table), ", ".join(qn(f.column) for f in fields),
        ", ".join(["%s"] * len(fields)))
    return sql, [f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields]


def floors(n: int, repeat: int) -> dict[str, float]:
    """Bare INSERTs of a job's row (autocommit, and one transaction) and bare Redis round
    trips: per second and CPU µs per call."""
    from django.db import connection
    from django.utils import timezone

    from django_delayq.core import ids
    from django_delayq.core.connection import get_engine
    from django_delayq.models import Job

    now = timezone.now()
    row = Job(id=ids.new_id(), queue="default", callable_path="bench_jobs.noop", args=[1],
              kwargs={}, run_at=now, scheduled_for=now, max_attempts=3)
    sql, params = bare_insert(row, connection)

    def insert(i: int) -> None:
        params[0] = ids.new_id()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)

    client = get_engine().client
    sha = client.script_load("return 1")
    _timed(200, 1, insert)
    out: dict[str, float] = {}
    for name, step, one_tx in (("insert_autocommit", insert, False),
                               ("insert_one_transaction", insert, True),
                               ("redis_round_trip", lambda i: client.evalsha(sha, 0), False)):
        rate, cpu = _timed(n, repeat, step, one_tx)
        out[name + "_per_s"], out[name + "_cpu_us"] = round(rate), round(cpu, 1)
    return out


def _enqueue_redis(n: int) -> dict[str, Any]:
    """Redis-side µs of the enqueue script over ``n`` autocommit ``schedule()`` calls
    (SLOWLOG at threshold 0 on the private server: median and 10th percentile, the
    latter less lengthened by a busy machine), and the commands Redis ran per call
    (``INFO commandstats``, the script's commands counted one by one)."""
    from django_delayq.core.connection import get_engine
    from django_delayq.engine import scripts

    client = get_engine().client
    sha = scripts.load("enqueue").sha.encode()
    client.config_set("slowlog-max-len", 4 * n + 1000)
    client.slowlog_reset()
    client.config_resetstat()
    client.config_set("slowlog-log-slower-than", 0)
    for i in range(n):
        _schedule(i)
    client.config_set("slowlog-log-slower-than", 10000)
    stats = client.info("commandstats")
    entries = client.slowlog_get(4 * n + 1000)
    times = sorted(e["duration"] for e in entries
                   if len(e["command"].split()) > 1 and e["command"].split()[1] == sha)
    calls = {name.removeprefix("cmdstat_"): round(v["calls"] / n, 2)
             for name, v in stats.items() if v["calls"] >= n / 2 and "config" not in name}
    return {"median_us": statistics.median(times) if times else None,
            "p10_us": times[len(times) // 10] if times else None,
            "commands_per_call": calls}


def rates(n: int, repeat: int = 1) -> dict[str, Any]:
    from django_delayq.core.api import JobSpec, schedule_many
    from django_delayq.engine import scripts

    for i in range(200):  # warm-up: scripts loaded, connections open
        _schedule(i)
    floor = floors(n, repeat)
    auto, auto_cpu = _timed(n, repeat, _schedule)
    one_tx, tx_cpu = _timed(n, repeat, _schedule, one_tx=True)
    trip_us = 1e6 / floor["redis_round_trip_per_s"]
    auto_floor = 1e6 / (1e6 / floor["insert_autocommit_per_s"] + trip_us)
    tx_floor = 1e6 / (1e6 / floor["insert_one_transaction_per_s"]
                      + trip_us / scripts.MAX_ENQUEUE)
    cpu_floor = floor["insert_autocommit_cpu_us"] + floor["redis_round_trip_cpu_us"]
    tx_cpu_floor = (floor["insert_one_transaction_cpu_us"]
                    + floor["redis_round_trip_cpu_us"] / scripts.MAX_ENQUEUE)
    many = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        schedule_many("bench_jobs.noop", [JobSpec(args=[i], delay=3600) for i in range(n)])
        many = max(many, n / (time.perf_counter() - t0))
    return {"floors": floor,
            "autocommit": {"floor_jobs_per_s": round(auto_floor), "jobs_per_s": round(auto),
                           "ratio": round(auto / auto_floor, 2),
                           "cpu_us_per_call": round(auto_cpu),
                           "python_us_per_call": round(auto_cpu - cpu_floor)},
            "one_transaction": {"floor_jobs_per_s": round(tx_floor),
                                "jobs_per_s": round(one_tx),
                                "ratio": round(one_tx / tx_floor, 2),
                                "cpu_us_per_call": round(tx_cpu),
                                "python_us_per_call": round(tx_cpu - tx_cpu_floor)},
            "enqueue_script_redis": _enqueue_redis(n),
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
    p.add_argument("--repeat", type=int, default=1, help="best of this many rounds")
    opts = p.parse_args()
    with bench_session("delayq-schedule-", opts.db, "delayq_bench_schedule"):
        out: dict[str, Any] = {"db": opts.db, "load": os.getloadavg()[0]}
        if opts.n:
            out.update(rates(opts.n, opts.repeat))
        if opts.memory:
            out.update(memory(opts.memory))
    print(json.dumps(out) if opts.json else json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
