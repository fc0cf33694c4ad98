#!/usr/bin/env python
"""Foundation benchmark: enqueue jobs/s, drain jobs/s for one worker process, lateness.

    python bench/foundation.py [--enqueue 5000] [--drain 20000] [--lateness 2000]
                               [--spread 10] [--concurrency 4] [--db sqlite|postgres]

Starts its own redis-server (free port, no persistence) and database, runs the real
``manage.py delayq_worker`` as a subprocess with audit rows on, and reads every figure
from the audit rows (start - due for lateness; first start to last finish for drain).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A private redis-server on a free loopback port, no persistence."""
    from django_delayq.embedded import start

    return start(workdir, tcp=True, persistence=False)


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def worker(*args: str) -> subprocess.Popen[bytes]:
    path = [str(HERE), str(ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    return subprocess.Popen([sys.executable, "-m", "django", "delayq_worker", "-v", "0", *args],
                            env=env, cwd=ROOT)


def bench_enqueue(n: int) -> dict[str, float]:
    from django_delayq import schedule
    from django_delayq.core.api import JobSpec, schedule_many

    t0 = time.perf_counter()
    for i in range(n):
        schedule("bench_jobs.noop", i, delay=3600)
    one = n / (time.perf_counter() - t0)
    from django.db import transaction

    t0 = time.perf_counter()
    with transaction.atomic():  # a loop in a view: one commit, one send per queue
        for i in range(n):
            schedule("bench_jobs.noop", i, delay=3600)
    one_tx = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    schedule_many("bench_jobs.noop", [JobSpec(args=[i], delay=3600) for i in range(n * 4)])
    bulk = n * 4 / (time.perf_counter() - t0)
    return {"enqueue_one_jobs_per_s": round(one), "enqueue_one_in_transaction_jobs_per_s":
            round(one_tx), "enqueue_bulk_jobs_per_s": round(bulk)}


def reset() -> None:
    from django_delayq.core.connection import get_engine
    from django_delayq.models import Job, JobAttempt

    get_engine().client.flushdb()
    JobAttempt.objects.all().delete()
    Job.objects.all().delete()
    # A fresh Redis has no reconciler epoch: the first worker would walk every live row
    # without grace (as after a data loss). Measure steady state: create the epoch now.
    from django.core.management import call_command

    call_command("delayq_reconcile", verbosity=0)


def start_breakdown() -> None:
    """Log every Redis command of the drain (SLOWLOG at 0 µs) for ``print_breakdown``."""
    from django_delayq.core.connection import get_engine

    client = get_engine().client
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 2_000_000)
    client.slowlog_reset()


def print_breakdown(n: int) -> None:
    """Print to stderr where Redis spent its time during the drain, per job: each script
    by name (its SHA looked up among lua/*.lua) and each plain command, then restore the
    SLOWLOG settings of bench_settings' private server."""
    from django_delayq.core.connection import get_engine
    from django_delayq.engine import scripts

    client = get_engine().client
    names = {scripts.load(f.stem).sha: f.stem
             for f in (Path(scripts.__file__).parents[1] / "lua").glob("*.lua")
             if f.stem != "lib"}
    totals: dict[str, list[int]] = {}
    for entry in client.slowlog_get(2_000_000):
        cmd = entry["command"].split()
        name = cmd[0].decode().upper()
        if name == "EVALSHA" and len(cmd) > 1:
            name = names.get(cmd[1].decode(), name)
        row = totals.setdefault(name, [0, 0])
        row[0] += 1
        row[1] += entry["duration"]
    client.config_set("slowlog-log-slower-than", 10_000)
    client.config_set("slowlog-max-len", 128)
    client.slowlog_reset()
    print("%-16s %9s %9s %9s" % ("redis", "calls/job", "µs/job", "µs/call"), file=sys.stderr)
    for name, (calls, us) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:15]:
        print("%-16s %9.3f %9.2f %9.2f" % (name, calls / n, us / n, us / calls), file=sys.stderr)


def bench_drain(n: int, concurrency: int, breakdown: bool = False) -> dict[str, float]:
    from django.db.models import Max, Min

    from django_delayq.core.api import JobSpec, schedule_many
    from django_delayq.models import Job

    reset()
    schedule_many("bench_jobs.noop", [JobSpec(args=[i]) for i in range(n)])
    if breakdown:
        start_breakdown()
    t0 = time.perf_counter()
    use0, redis0 = _children_use(), _redis_cpu_s()
    proc = worker("--burst", "--concurrency", str(concurrency))
    proc.wait()
    if breakdown:
        print_breakdown(n)
    wall = time.perf_counter() - t0
    use = [b - a for a, b in zip(use0, _children_use())]  # the worker's run, start included
    cpu, redis_cpu = use[0] + use[1], _redis_cpu_s() - redis0
    done = Job.objects.filter(status="succeeded")
    agg = done.aggregate(first=Min("started_at"), last=Max("finished_at"))
    span = (agg["last"] - agg["first"]).total_seconds()
    return {"drain_jobs": done.count(), "drain_jobs_per_s": round(done.count() / span),
            "drain_process_wall_s": round(wall, 2),
            "drain_worker_cpu_us_per_job": round(cpu * 1e6 / max(1, n)),
            "drain_worker_system_cpu_us_per_job": round(use[1] * 1e6 / max(1, n)),
            "drain_worker_context_switches_per_job": round((use[2] + use[3]) / max(1, n), 2),
            "drain_redis_cpu_us_per_job": round(redis_cpu * 1e6 / max(1, n))}


def _redis_cpu_s() -> float:
    """CPU seconds (user + system) the private redis-server used so far."""
    from django_delayq.core.connection import get_engine

    info = get_engine().client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _children_use() -> tuple[float, float, int, int]:
    """User and system CPU seconds, voluntary and involuntary context switches of the
    ended child processes waited for so far."""
    import resource

    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime, use.ru_stime, use.ru_nvcsw, use.ru_nivcsw


def bench_lateness(n: int, spread_s: float, concurrency: int) -> dict[str, float]:
    from datetime import timedelta

    from django.utils import timezone

    from django_delayq.core.api import JobSpec, schedule_many
    from django_delayq.models import Job

    reset()
    proc = worker("--concurrency", str(concurrency))
    time.sleep(2.0)  # let it start and go idle
    start = timezone.now() + timedelta(seconds=1)
    schedule_many("bench_jobs.noop", [
        JobSpec(args=[i], at=start + timedelta(seconds=spread_s * i / n)) for i in range(n)])
    deadline = time.monotonic() + spread_s + 30
    while Job.objects.filter(status="succeeded").count() < n and time.monotonic() < deadline:
        time.sleep(0.25)
    proc.terminate()
    proc.wait()
    late = [(j.started_at - j.run_at).total_seconds() * 1000
            for j in Job.objects.filter(status="succeeded")]
    return {"lateness_jobs": len(late), "lateness_p50_ms": round(statistics.median(late), 2),
            "lateness_p99_ms": round(pct(late, 99), 2), "lateness_max_ms": round(max(late), 2)}


def open_bench(db: str) -> subprocess.Popen[bytes]:
    """A private Redis and database (``bench_settings``), Django set up; returns the
    redis-server process to stop."""
    workdir = Path(tempfile.mkdtemp(prefix="delayq-bench-"))
    redis_proc, url = start_redis(workdir)
    os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir), BENCH_DB=db,
                      DJANGO_SETTINGS_MODULE="bench_settings")
    import django

    django.setup()
    return redis_proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--enqueue", type=int, default=5000)
    parser.add_argument("--drain", type=int, default=20000)
    parser.add_argument("--lateness", type=int, default=2000)
    parser.add_argument("--spread", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--redis-breakdown", action="store_true",
                        help="print to stderr Redis's time per job during the drain, by "
                             "script and command (SLOWLOG at 0 µs: its own cost is "
                             "counted in the drain's figures)")
    opts = parser.parse_args()
    redis_proc = open_bench(opts.db)
    try:
        from django.core.management import call_command

        if opts.db == "postgres":
            from django.db import connection

            with connection.cursor() as c:
                c.execute("DROP TABLE IF EXISTS django_delayq_jobattempt, django_delayq_job, "
                          "django_migrations CASCADE")
        call_command("migrate", verbosity=0)
        results: dict[str, float | str] = {"db": opts.db, "concurrency": opts.concurrency}
        if opts.enqueue:
            results.update(bench_enqueue(opts.enqueue))
        if opts.drain:
            results.update(bench_drain(opts.drain, opts.concurrency, opts.redis_breakdown))
        if opts.lateness:
            results.update(bench_lateness(opts.lateness, opts.spread, opts.concurrency))
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    if opts.json:
        print(json.dumps(results))
    else:
        for key, value in results.items():
            print("%-28s %s" % (key, value))
    return 0


if __name__ == "__main__":
    sys.exit(main())
