#!/usr/bin/env python
"""Lateness on a busy worker: timed jobs coming due while the same worker drains a backlog.

    python bench/busy_lateness.py [--backlog 20000] [--timed 2000] [--spread 2]
                                  [--lead 3] [--priority 0] [--concurrency 4]
                                  [--processes N]

Starts its own redis-server and SQLite database (as ``foundation.py``) and one
``delayq_worker`` (``--processes N``: a supervisor and N children). Schedules ``--timed``
no-op jobs due over ``--spread`` seconds from ``--lead`` seconds ahead (``--priority``:
theirs), then a backlog of ``--backlog`` no-op jobs due now (scheduling it takes ~1.5 s),
so that the timed jobs come due while the worker drains the backlog. ``BENCH_CLAIM_BATCH``
sets ``CLAIM_BATCH`` (default 200). Prints the lateness (start - due, from the audit rows)
of the timed jobs, p50/p99/max, the backlog's drain rate and the load average.
``--trace``: the worker runs with its claims timed (``Engine.claim`` wrapped in the worker
process by this bench, not in the package) and the lateness is split into due -> claimed
and claimed -> started.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import foundation  # noqa: E402 - bench/foundation.py: Redis and worker helpers

# Run in the worker process with --trace: each claimed job's claim time (wall clock, when
# the reply is back), written at exit to $BENCH_TRACE.
TRACE = """
import atexit, os, sys, time
from django_delayq.engine import engine, sharded
seen = {}
for cls in (engine.Engine, sharded.ShardedEngine):
    def claim(self, queue, limit, lease_ms, now_ms=None, _orig=cls.claim):
        result = _orig(self, queue, limit, lease_ms, now_ms)
        now = time.time()
        for job in result.jobs:
            seen.setdefault(job.id, now)
        return result
    cls.claim = claim
def dump():
    with open(os.environ["BENCH_TRACE"], "w") as f:
        f.writelines("%s %.6f\\n" % item for item in seen.items())
atexit.register(dump)
from django.core.management import execute_from_command_line
execute_from_command_line(["django", "delayq_worker", "-v", "0", *sys.argv[1:]])
"""


def traced_worker(*args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent)]))
    return subprocess.Popen([sys.executable, "-c", TRACE, *args], env=env, cwd=HERE.parent)


def split(rows: list, timed: set[str], path: Path) -> dict[str, float]:
    """due -> claimed and claimed -> started (ms) of the timed jobs, p50/p99."""
    claimed = dict((i, float(t)) for i, t in (line.split() for line in path.open()))
    to_claim, to_start = [], []
    for i, due, started in rows:
        if i in timed and i in claimed:
            to_claim.append((claimed[i] - due.timestamp()) * 1000)
            to_start.append((started.timestamp() - claimed[i]) * 1000)
    return {"claim_p50_ms": statistics.median(to_claim), "claim_p99_ms": foundation.pct(
        to_claim, 99), "start_p50_ms": statistics.median(to_start),
        "start_p99_ms": foundation.pct(to_start, 99)}


def run(opts: argparse.Namespace) -> dict[str, float]:
    from datetime import timedelta

    from django.db.models import Max, Min
    from django.utils import timezone

    from django_delayq.core.api import JobSpec, schedule_many
    from django_delayq.models import Job

    trace = Path(os.environ["BENCH_DIR"]) / "claims.txt"
    os.environ["BENCH_TRACE"] = str(trace)
    args = ["--concurrency", str(opts.concurrency)]
    if opts.processes:
        args += ["--processes", str(opts.processes)]
    proc = (traced_worker if opts.trace else foundation.worker)(*args)
    time.sleep(2.0)  # let it start and go idle
    start = timezone.now() + timedelta(seconds=opts.lead)
    timed = set(schedule_many("bench_jobs.noop", [
        JobSpec(args=["t", i], at=start + timedelta(seconds=opts.spread * i / opts.timed))
        for i in range(opts.timed)], priority=opts.priority))
    schedule_many("bench_jobs.noop", [JobSpec(args=[i]) for i in range(opts.backlog)])
    total = opts.timed + opts.backlog
    deadline = time.monotonic() + opts.spread + 120
    while Job.objects.filter(status="succeeded").count() < total and time.monotonic() < deadline:
        time.sleep(0.25)
    load = os.getloadavg()
    proc.terminate()
    proc.wait()
    rows = list(Job.objects.filter(status="succeeded").values_list("id", "run_at", "started_at"))
    late = [(s - r).total_seconds() * 1000 for i, r, s in rows if i in timed]
    backlog = Job.objects.filter(status="succeeded").exclude(id__in=timed)
    agg = backlog.aggregate(first=Min("started_at"), last=Max("finished_at"))
    span = (agg["last"] - agg["first"]).total_seconds()
    first_due = min(r for i, r, _ in rows if i in timed)
    parts = split(rows, timed, trace) if opts.trace else {}
    return {**parts, "timed_jobs": len(late), "p50_ms": statistics.median(late),
            "p99_ms": foundation.pct(late, 99), "max_ms": max(late),
            "over_5ms": sum(1 for x in late if x > 5),
            "backlog_start_s": (agg["first"] - first_due).total_seconds(),
            "backlog_end_s": (agg["last"] - first_due).total_seconds(),
            "backlog_jobs_per_s": backlog.count() / span, "load1": load[0]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backlog", type=int, default=20000)
    p.add_argument("--timed", type=int, default=2000)
    p.add_argument("--spread", type=float, default=2.0)
    p.add_argument("--priority", type=int, default=0, help="priority of the timed jobs")
    p.add_argument("--lead", type=float, default=3.0, help="first timed job due after, s")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--processes", type=int, default=0,
                   help="worker processes (0: one, no supervisor)")
    p.add_argument("--trace", action="store_true", help="split lateness at the claim")
    opts = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="delayq-busy-lateness-"))
    redis_proc, url = foundation.start_redis(workdir)
    os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir),
                      DJANGO_SETTINGS_MODULE="bench_settings")
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        r = run(opts)
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    print("timed jobs %d (priority %d) due over %g s during a %d-job backlog: lateness p50 "
          "%.2f ms, p99 %.2f ms, max %.2f ms; backlog %d jobs/s; load average %.2f (%d cpus)"
          % (r["timed_jobs"], opts.priority, opts.spread, opts.backlog, r["p50_ms"],
             r["p99_ms"], r["max_ms"], r["backlog_jobs_per_s"], r["load1"],
             os.cpu_count() or 0))
    if opts.trace:
        print("timed jobs: due -> claimed p50 %.2f ms, p99 %.2f ms; claimed -> started p50 "
              "%.2f ms, p99 %.2f ms" % (r["claim_p50_ms"], r["claim_p99_ms"],
                                         r["start_p50_ms"], r["start_p99_ms"]))
    print("%d timed jobs over 5 ms late; the backlog ran from %.2f s to %.2f s after the "
          "first timed job was due" % (r["over_5ms"], r["backlog_start_s"], r["backlog_end_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
