#!/usr/bin/env python
"""One hot queue on a 3-master Redis Cluster, in 1 shard and in 3 shards.

    python bench/sharded.py [--jobs 10000] [--timed 1000] [--spread 3] [--workers 2]
                            [--concurrency 8] [--shards 1,3] [--events on,off]

Starts a local cluster of three masters (``tests/cluster/server.py``'s ``LocalCluster``)
and a SQLite database in a temporary directory. For each shard count, under a fresh
prefix: schedules ``--jobs`` no-op jobs due now onto queue ``hot``, starts ``--workers``
``delayq_worker`` processes and measures the drain (jobs/s, from the first start to the
last finish in the audit rows) and the Redis CPU of each node over it (INFO CPU,
used_cpu_sys + used_cpu_user deltas); then, with the workers idle, ``--timed`` jobs due
over ``--spread`` seconds and their lateness (start - due) p50/p99. ``--events``: each
shard count with the event stream on, off, or both (the busiest node's share of the
Redis CPU shows where the stream's work lands). Prints a table and the load average.
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
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

SETTINGS = '''
import os
from bench_settings import *  # noqa: F403
from bench_settings import DELAYQ as _BASE
DELAYQ = {**_BASE, "PREFIX": os.environ["BENCH_PREFIX"], "QUEUES": ["hot"],
          "DEFAULT_QUEUE": "hot",
          "EVENTS": os.environ.get("BENCH_EVENTS", "on") == "on",
          "QUEUE_OPTIONS": {"hot": {"shards": int(os.environ["BENCH_SHARDS"])}}}
'''


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def cpu(cluster: object) -> list[float]:
    """used_cpu_sys + used_cpu_user of each node, seconds."""
    out = []
    for node in cluster.nodes:  # type: ignore[attr-defined]
        info = node.client().info("cpu")
        out.append(float(info["used_cpu_sys"]) + float(info["used_cpu_user"]))
    return out


def workers(n: int, concurrency: int, workdir: Path) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(workdir), str(HERE), str(ROOT)]))
    return [subprocess.Popen([sys.executable, "-m", "django", "delayq_worker", "-v", "0",
                              "--concurrency", str(concurrency)], env=env, cwd=ROOT)
            for _ in range(n)]


def wait_succeeded(total: int, timeout: float) -> None:
    from django_delayq.models import Job

    deadline = time.monotonic() + timeout
    while Job.objects.filter(status="succeeded").count() < total:
        if time.monotonic() > deadline:
            raise RuntimeError("only %d of %d jobs succeeded in %.0f s" % (
                Job.objects.filter(status="succeeded").count(), total, timeout))
        time.sleep(0.25)


def drain(opts: argparse.Namespace, cluster: object, workdir: Path
          ) -> tuple[dict[str, float], list[subprocess.Popen[bytes]]]:
    from django.db.models import Max, Min

    from django_delayq.core.api import JobSpec, schedule_many
    from django_delayq.models import Job

    schedule_many("bench_jobs.noop", [JobSpec(args=[i]) for i in range(opts.jobs)],
                  queue="hot")
    before = cpu(cluster)
    procs = workers(opts.workers, opts.concurrency, workdir)
    wait_succeeded(opts.jobs, 600)
    used = [b - a for a, b in zip(before, cpu(cluster))]
    agg = Job.objects.aggregate(first=Min("started_at"), last=Max("finished_at"))
    span = (agg["last"] - agg["first"]).total_seconds()
    return {"jobs_per_s": opts.jobs / span, "cpu": used}, procs  # type: ignore[dict-item]


def lateness(opts: argparse.Namespace) -> dict[str, float]:
    from datetime import timedelta

    from django.utils import timezone

    from django_delayq.core.api import JobSpec, schedule_many
    from django_delayq.models import Job

    start = timezone.now() + timedelta(seconds=2)
    ids = set(schedule_many("bench_jobs.noop", [
        JobSpec(args=["t", i], at=start + timedelta(seconds=opts.spread * i / opts.timed))
        for i in range(opts.timed)], queue="hot"))
    wait_succeeded(opts.jobs + opts.timed, opts.spread + 120)
    rows = Job.objects.filter(id__in=ids).values_list("run_at", "started_at")
    late = [(s - r).total_seconds() * 1000 for r, s in rows]
    return {"p50_ms": pct(late, 50), "p99_ms": pct(late, 99)}


def spread_prefix(cluster: object, shards: int, fresh: object) -> str:
    """A fresh prefix under which the shards of ``hot`` live on distinct nodes."""
    from django_delayq.engine.shard_map import shard_name

    for _ in range(300):
        prefix: str = fresh()  # type: ignore[operator]
        nodes = {cluster.node_of("{%s:%s}" % (prefix, shard_name("hot", i)))  # type: ignore[attr-defined]
                 for i in range(shards)}
        if len(nodes) == min(shards, len(cluster.nodes)):  # type: ignore[attr-defined]
            return prefix
    raise RuntimeError("no prefix spreads %d shards over the cluster" % shards)


def one(opts: argparse.Namespace, cluster: object, shards: int, workdir: Path,
        events: str = "on") -> dict[str, object]:
    from django.conf import settings

    from django_delayq.core import conf, connection
    from django_delayq.models import Job
    from tests.conftest import unique_prefix

    Job.objects.all().delete()
    os.environ.update(BENCH_PREFIX=spread_prefix(cluster, shards, unique_prefix),
                      BENCH_SHARDS=str(shards), BENCH_EVENTS=events)
    settings.DELAYQ = {**settings.DELAYQ, "PREFIX": os.environ["BENCH_PREFIX"],
                       "EVENTS": events == "on",
                       "QUEUE_OPTIONS": {"hot": {"shards": shards}}}
    conf.get_settings.cache_clear()
    connection.reset()
    result, procs = drain(opts, cluster, workdir)
    try:
        result.update(lateness(opts))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()
    return {"shards": shards, "events": events, **result}


def table(rows: list[dict[str, object]], opts: argparse.Namespace) -> None:
    print("%d jobs drained by %d workers x %d threads; %d timed jobs over %g s"
          % (opts.jobs, opts.workers, opts.concurrency, opts.timed, opts.spread))
    print("| shards | events | drain jobs/s | Redis CPU s per node (drain) | busiest node | "
          "lateness p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        used: list[float] = r["cpu"]  # type: ignore[assignment]
        print("| %d | %s | %.0f | %s | %.0f%% | %.1f | %.1f |" % (
            r["shards"], r["events"], r["jobs_per_s"], " / ".join("%.2f" % c for c in used),
            100 * max(used) / max(sum(used), 1e-9), r["p50_ms"], r["p99_ms"]))
    print("load average %.2f %.2f %.2f (%d cpus)" % (*os.getloadavg(), os.cpu_count() or 0))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=10000)
    p.add_argument("--timed", type=int, default=1000)
    p.add_argument("--spread", type=float, default=3.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--shards", default="1,3")
    p.add_argument("--events", default="on", help="on, off or on,off")
    opts = p.parse_args()
    from tests.cluster.server import LocalCluster

    workdir = Path(tempfile.mkdtemp(prefix="delayq-sharded-"))
    (workdir / "sharded_settings.py").write_text(SETTINGS)
    cluster = LocalCluster().start()
    os.environ.update(DELAYQ_REDIS_URL=cluster.url, BENCH_DIR=str(workdir),
                      BENCH_PREFIX="x", BENCH_SHARDS="1",
                      DJANGO_SETTINGS_MODULE="sharded_settings")
    sys.path.insert(0, str(workdir))
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        rows = [one(opts, cluster, int(n), workdir, events)
                for n in opts.shards.split(",") for events in opts.events.split(",")]
    finally:
        cluster.cleanup()
    table(rows, opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
