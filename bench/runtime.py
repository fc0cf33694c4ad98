#!/usr/bin/env python
"""Runtime benchmark: what ``delayq_worker --processes`` buys.

    python bench/runtime.py [--drain 20000] [--cpu 400] [--cpu-ms 20] [--concurrency 4]
                            [--db sqlite|postgres]

1. Drain: ``--drain`` due no-op jobs, run by ``delayq_worker --burst`` (one process, no
   supervisor), by ``--processes 1``, then by ``--processes 2`` (each process
   ``--concurrency`` threads): jobs/s and the ratio of the last two.
2. CPU-bound: ``--cpu`` jobs of ~``--cpu-ms`` ms of pure Python each (calibrated here on
   one thread's CPU time): one process with ``--concurrency`` threads (the GIL lets one
   run at a time), then ``--processes 2`` with ``--concurrency`` threads each.

Starts its own redis-server (free port, no persistence) and SQLite database (or, with
``--db postgres``, an empty database delayq_bench_runtime on 127.0.0.1), runs the
real ``manage.py delayq_worker`` as a subprocess with audit rows on, and reads jobs/s from
the audit rows (first start to last finish). Prints the CPU seconds the worker processes
and redis-server used, and the load average around each run: on a busy machine the
ratios mean little.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]


def calibrate(ms: float) -> int:
    """Iterations of ``runtime_jobs.spin`` taking ``ms`` milliseconds here, one thread."""
    from runtime_jobs import spin

    n = 20_000
    while True:  # CPU time, not wall time: the machine may be busy
        t0 = time.thread_time()
        spin(n)
        took = time.thread_time() - t0
        if took > 0.2:
            return int(n * ms / 1000 / took)
        n *= 2


def cpu_s() -> float:
    """CPU seconds of the worker processes that ended (supervisor and children)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


REDIS_PID = 0


def redis_cpu_s() -> float:
    import psutil

    times = psutil.Process(REDIS_PID).cpu_times()
    return float(times.user + times.system)


PG_DATABASE = "delayq_bench_runtime"  # its own database: dropped and created per run


def fresh_postgres(name: str) -> None:
    """An empty database ``name`` on the PostgreSQL of bench_settings (127.0.0.1)."""
    import psycopg

    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres",
                         autocommit=True) as conn:
        conn.execute('DROP DATABASE IF EXISTS "%s"' % name)
        conn.execute('CREATE DATABASE "%s"' % name)


def load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg()


def run(label: str, path: str, args: list[list[object]], worker_args: list[str]) -> float:
    """Schedule the jobs, drain them with one ``delayq_worker --burst``; jobs/s."""
    from django.db.models import Max, Min
    from foundation import reset

    from django_delayq.core.api import JobSpec, schedule_many
    from django_delayq.models import Job

    reset()
    schedule_many(path, [JobSpec(args=a) for a in args])
    before = load()
    cpu0, redis0 = cpu_s(), redis_cpu_s()
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]))
    subprocess.run([sys.executable, "-m", "django", "delayq_worker", "--burst", "-v", "0",
                    *worker_args], env=env, cwd=ROOT, check=True)
    wall = time.perf_counter() - t0
    cpu, redis_cpu = cpu_s() - cpu0, redis_cpu_s() - redis0
    done = Job.objects.filter(status="succeeded")
    agg = done.aggregate(first=Min("started_at"), last=Max("finished_at"))
    count = done.count()
    rate = count / (agg["last"] - agg["first"]).total_seconds()
    print("%-44s %6d jobs %6.0f jobs/s  wall %.1fs  CPU s: worker(s) %.1f, redis %.1f  "
          "load %s -> %s" % (label, count, rate, wall, cpu, redis_cpu, before, load()),
          flush=True)
    if count != len(args):
        print("  !! %d jobs did not succeed" % (len(args) - count))
    return rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--cpu", type=int, default=400)
    parser.add_argument("--cpu-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    opts = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="delayq-bench-runtime-"))
    from foundation import start_redis

    redis_proc, url = start_redis(workdir)
    global REDIS_PID
    REDIS_PID = redis_proc.pid
    os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir), BENCH_DB=opts.db,
                      DJANGO_SETTINGS_MODULE="runtime_settings")
    os.environ.setdefault("BENCH_PGDATABASE", PG_DATABASE)
    try:
        import django
        from django.core.management import call_command

        if opts.db == "postgres":
            fresh_postgres(os.environ["BENCH_PGDATABASE"])
        django.setup()
        call_command("migrate", verbosity=0)
        c = str(opts.concurrency)
        print("cpus %s, load %s" % (os.cpu_count(), load()))
        if opts.drain:
            noop = [[i] for i in range(opts.drain)]
            run("drain: one process, no supervisor, -c %s" % c, "bench_jobs.noop", noop,
                ["-c", c])
            one = run("drain: --processes 1 -c %s" % c, "bench_jobs.noop", noop,
                      ["--processes", "1", "-c", c])
            two = run("drain: --processes 2 -c %s" % c, "bench_jobs.noop", noop,
                      ["--processes", "2", "-c", c])
            print("drain ratio (2 processes / 1): %.2fx" % (two / one))
        if opts.cpu:
            spin = [[calibrate(opts.cpu_ms)]] * opts.cpu
            one = run("cpu %gms: 1 process, -c %s" % (opts.cpu_ms, c), "runtime_jobs.spin",
                      spin, ["-c", c])
            two = run("cpu %gms: --processes 2 -c %s" % (opts.cpu_ms, c), "runtime_jobs.spin",
                      spin, ["--processes", "2", "-c", c])
            print("cpu ratio (2 processes / 1 process with threads): %.2fx" % (two / one))
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
