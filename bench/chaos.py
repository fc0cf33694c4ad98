"""The chaos run: scenarios of faults under real workers, each with its own figures.

    python bench/chaos.py [--scenarios 1,2,3,4,5,6] [--db sqlite|postgres]
                          [--jobs 10000] [--seconds 30] [--workers 4]   (scenario 1)
                          [--jobs-each 600] [--spread 20]               (scenarios 2-6)
                          [--lease SECONDS] [--seed N] [--keep]

Loopback only. Starts its own redis-server (AOF on, ``appendfsync everysec``) on a free
port and its own database (a SQLite WAL file in a temp dir; ``--db postgres`` creates a
database on 127.0.0.1:5432), then runs the scenarios one after the other with real
``manage.py delayq_worker`` processes (``bench/chaos_scenarios.py``):

1. thread-mode workers SIGKILLed every ~2 s, Redis restarted once (SIGTERM; jobs
   scheduled meanwhile wait in the outbox) and wiped once (FLUSHALL);
2. ``--processes 2 --concurrency 4`` workers, one child SIGKILLed every ~3 s;
3. the database unreachable for two leases + 2 s: PostgreSQL through a TCP proxy on
   loopback (``chaos_proxy.py``) that resets every connection, SQLite locked by the
   harness (``BEGIN EXCLUSIVE``; in WAL mode readers still read);
4. Redis SIGSTOPped for the lease + 3 s, then SIGCONT;
5. a worker with ``--worker-id chaos-fixed`` SIGKILLed three times, each time started
   again under that id;
6. ``--processes 1 --concurrency 4``: a running job cancelled and one killed at its hard
   time limit (``timeout=3``, two attempts) beside other jobs.

Every job (``tests.jobs_chaos.stamp``) appends its start and its completion to a file:
neither a database nor a Redis stall touches that record. Throughout, a 1-second periodic
schedule (``DELAYQ["SCHEDULES"]`` in ``chaos_settings.py``) stamps its ticks there too.
Per scenario it prints jobs scheduled, lost, completed twice (explained: the harness
SIGKILLed the process that had run it, or wiped Redis; none else), runs of one job
overlapping in time, rows stuck non-final or ended otherwise, attempt mismatches and
tick gaps (``chaos_report.py``): the seconds without a tick beyond the scenario's outage
and 5 s, less those explained, each printed with its reason: the tick's job was held by
a worker the harness SIGKILLed (it waits for the dead worker's lease, by design; the
report names that worker), or no worker was up (each one killed or still starting: a
worker is up from its first heartbeat, noted in the timeline). Then a summary table.
Exit 1 when a scenario fails.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chaos_report  # noqa: E402
import chaos_scenarios  # noqa: E402
from chaos_infra import (  # noqa: E402,F401 - the set-up bench/kill_rerun.py uses too
    QUEUE,
    ROOT,
    Event,
    PidWatch,
    Run,
    drop_database,
    make_database,
    note,
    setup_django,
    start_redis,
    start_worker,
    stop_workers,
)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default="1,2,3,4,5,6", help="which, in this order")
    p.add_argument("--jobs", type=int, default=10_000, help="scenario 1's jobs")
    p.add_argument("--seconds", type=float, default=30.0, help="scenario 1: due over this")
    p.add_argument("--workers", type=int, default=4, help="scenario 1's workers")
    p.add_argument("--kill-every", type=float, default=2.0, help="scenario 1")
    p.add_argument("--jobs-each", type=int, default=600, help="jobs of scenarios 2 to 6")
    p.add_argument("--spread", type=float, default=20.0,
                   help="scenarios 2 to 6: jobs due over this many seconds")
    p.add_argument("--child-kill-every", type=float, default=3.0, help="scenario 2")
    p.add_argument("--lease", type=float, default=None, help="LEASE_SECONDS (default 10)")
    p.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--converge-timeout", type=float, default=90.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, database)")
    opts = p.parse_args(argv)
    opts.scenarios = [int(n) for n in opts.scenarios.split(",") if n.strip()]
    unknown = set(opts.scenarios) - set(chaos_scenarios.SCENARIOS)
    if unknown:
        p.error("no scenario %s (1 to %d)" % (sorted(unknown), len(chaos_scenarios.SCENARIOS)))
    return opts


def first_tick(run: Run, timeout: float) -> float | None:
    """The due time of the schedule's first tick, waiting up to ``timeout`` for it."""
    from tests import jobs_chaos

    deadline = time.time() + timeout
    while time.time() < deadline:
        dues = [r["due"] for r in jobs_chaos.stamped_runs(run.runs_dir) if r["due"]]
        if dues:
            return min(dues)
        time.sleep(0.2)
    return None


def scenarios(run: Run, rng: random.Random, registered: chaos_report.Registered
              ) -> list[tuple[chaos_scenarios.Scenario, dict]]:
    from tests import jobs_chaos

    done: list[tuple[chaos_scenarios.Scenario, dict]] = []
    window_start: float | None = None
    for number in run.opts.scenarios:
        key, title, body = chaos_scenarios.SCENARIOS[number]
        sc = chaos_scenarios.Scenario(number=number, key=key, title=title, t0=time.time())
        note(run, "scenario %d %s" % (number, key))
        body(run, sc, rng)
        # the ticks that ran during the faults end final too: one killed between its ack
        # and its audit flush waits for the reconciler's grace and second look, which
        # may take longer than a fixed window after the faults
        ticks = [r["job"] for r in jobs_chaos.stamped_runs(run.runs_dir)
                 if r["due"] is not None and r["start"] >= sc.t0 - 2]
        sc.converge_s = chaos_report.converge(sc.ids + list(sc.special) + ticks,
                                              run.opts.converge_timeout)
        sc.t1 = time.time()
        runs = jobs_chaos.stamped_runs(run.runs_dir)
        if number == 6 and sc.special:
            chaos_scenarios.cancel_limit_figures(run, sc, runs)
        if window_start is None:  # from the schedule's first tick
            window_start = first_tick(run, 1.0) or sc.t0
        result = chaos_report.analyse(run, sc, runs, window_start, sc.t1 - 2, registered)
        window_start = sc.t1 - 2
        chaos_report.block(sc, result)
        done.append((sc, result))
    return done


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    rng = random.Random(opts.seed)
    tmp = Path(tempfile.mkdtemp(prefix="delayq-chaos-"))
    (tmp / "runs").mkdir()
    started = time.time()
    redis = start_redis(tmp)
    db = make_database(opts, tmp)
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="bench.chaos_settings", CHAOS_DB=db,
               CHAOS_REDIS_URL=redis.url, CHAOS_TICKS_DIR=str(tmp / "runs"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if opts.lease:
        env["CHAOS_LEASE"] = str(opts.lease)
    run = Run(opts=opts, tmp=tmp, redis=redis, env=env)
    proxy = None
    if opts.db == "postgres":  # the workers of scenario 3 reach PostgreSQL through it
        from chaos_proxy import TcpProxy

        proxy = TcpProxy(5432)
    run.proxy = proxy
    watch = PidWatch(run)
    registered = None
    try:
        setup_django(env)
        registered = chaos_report.Registered(run)
        print("chaos run: %s, lease %g s, scenarios %s" % (
            opts.db, chaos_scenarios.lease(run), ",".join(map(str, opts.scenarios))))
        done = scenarios(run, rng, registered)
        stop_workers(run)
        chaos_report.summary(done)
        print("wall time %.1f s; load average %.2f %.2f %.2f (%d cpus)" % (
            time.time() - started, *os.getloadavg(), os.cpu_count() or 0))
        ok = all(r["ok"] for _, r in done)
        print("logs and data:", "%s %s" % (tmp, db) if opts.keep else "(removed; --keep)")
        print("RESULT:", "PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        stop_workers(run)
        watch.close()
        if registered is not None:
            registered.close()
        if proxy is not None:
            proxy.close()
        redis.cleanup()
        from django.db import connections

        connections.close_all()
        if not opts.keep:
            drop_database(db)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
