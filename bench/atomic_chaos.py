"""Exactly once for database effects, by force: the same run with atomic=True and False.

    python bench/atomic_chaos.py [--jobs 2000] [--kills 12] [--workers 2]
                                 [--concurrency 4] [--db sqlite|postgres] [--seed N]
                                 [--modes atomic,plain] [--keep]

Loopback only. Starts its own redis-server (no persistence) on a free port and its own
database (a SQLite WAL file in a temp dir; ``--db postgres`` creates a database on
127.0.0.1:5432). For each mode it schedules ``--jobs`` jobs, each adding one to a counter
row and inserting a row keyed by its job id, then taking 2-30 ms
(``tests.jobs_atomic.bump``), runs ``--workers`` real ``manage.py delayq_worker``
processes, SIGKILLs one of them ``--kills`` times at random points (after a random number
of further commits; a new one starts at once) and restarts Redis, empty, once in the
middle. When every row is final it prints, per mode: rows succeeded and not final,
counter increments beyond the jobs, key rows doubled, key rows missing.

With ``atomic=True`` every figure but "succeeded" must be 0 (exit 1 otherwise). The
``atomic=False`` run is the same jobs at least once: its duplicates are printed, not
judged; they are what ``atomic=True`` prevents.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_infra import (  # noqa: E402
    ROOT,
    Run,
    drop_database,
    kill,
    make_database,
    setup_django,
    start_worker,
    stop_workers,
)

from tests.redis_server import RedisServer, binaries  # noqa: E402

COUNTERS = tuple("c%d" % i for i in range(8))
MODES = {"atomic": True, "plain": False}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--kills", type=int, default=12)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--modes", default="atomic,plain", help="atomic (atomic=True), plain")
    p.add_argument("--converge-timeout", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, database)")
    opts = p.parse_args(argv)
    opts.modes = [m.strip() for m in opts.modes.split(",") if m.strip()]
    if set(opts.modes) - set(MODES):
        p.error("--modes takes atomic and plain")
    return opts


def committed() -> int:
    from tests import jobs_atomic

    return sum(jobs_atomic.counters().values())


def wait_for(predicate, timeout: float, step: float = 0.005) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def open_rows(ids: set[str]) -> int:
    from django_delayq.models import FINAL_STATUSES, Job

    return Job.objects.filter(pk__in=ids).exclude(status__in=FINAL_STATUSES).count()


def one_mode(run: Run, atomic: bool, rng: random.Random) -> dict[str, float]:
    """Schedule, run under kills and one Redis restart, wait for every row to be final."""
    from django_delayq import JobSpec, schedule_many
    from django_delayq.models import Job, JobAttempt
    from tests import jobs_atomic

    opts = run.opts
    run.redis.client().flushall()
    JobAttempt.objects.all().delete()
    Job.objects.all().delete()
    jobs_atomic.create_tables(COUNTERS)
    names = [COUNTERS[i % len(COUNTERS)] for i in range(opts.jobs)]
    t0 = time.time()
    ids = set(schedule_many("tests.jobs_atomic.bump", [
        JobSpec(args=(name, rng.uniform(0.002, 0.03))) for name in names],
        atomic=atomic, max_attempts=50))
    args = ("--concurrency", str(opts.concurrency))
    workers = [start_worker(run, *args) for _ in range(opts.workers)]
    step = max(1, opts.jobs // (opts.kills + 2))
    restarted = False
    for n in range(opts.kills):
        target = min(opts.jobs - opts.jobs // 20, committed() + rng.randint(step // 4, step))
        wait_for(lambda t=target: committed() >= t, 120)
        victim = workers.pop(rng.randrange(len(workers)))
        kill(run, victim.pid)
        victim.wait()
        workers.append(start_worker(run, *args))
        if not restarted and n >= opts.kills // 2:
            run.redis.restart()  # no AOF, no RDB: every key is gone
            restarted = True
    converged = wait_for(lambda: open_rows(ids) == 0, opts.converge_timeout, 0.2)
    wall = time.time() - t0
    stop_workers(run)
    return figures(ids, names, converged, wall)


def figures(ids: set[str], names: list[str], converged: bool, wall: float
            ) -> dict[str, float]:
    from django_delayq.models import Job, JobStatus
    from tests import jobs_atomic

    statuses = Counter(Job.objects.filter(pk__in=ids).values_list("status", flat=True))
    expected = Counter(names)
    counts = jobs_atomic.counters()
    effects = jobs_atomic.effects()
    return {
        "jobs": len(ids),
        "succeeded": statuses.get(JobStatus.SUCCEEDED, 0),
        "rows not final": sum(n for s, n in statuses.items() if s not in (
            JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.EXPIRED)),
        "rows ended otherwise": sum(n for s, n in statuses.items()
                                    if s in (JobStatus.DEAD, JobStatus.CANCELLED,
                                             JobStatus.EXPIRED)),
        "counter increments beyond jobs": sum(counts.get(c, 0) - n for c, n in expected.items()),
        "counters off": sum(counts.get(c, 0) != n for c, n in expected.items()),
        "key rows doubled": sum(n - 1 for i, n in effects.items() if i in ids and n > 1),
        "jobs run twice or more": sum(1 for i, n in effects.items() if i in ids and n > 1),
        "key rows missing": sum(1 for i in ids if i not in effects),
        "converged": int(converged),
        "wall time (s)": round(wall, 1),
    }


JUDGED = ("rows not final", "rows ended otherwise", "counter increments beyond jobs",
          "counters off", "key rows doubled", "key rows missing")


def report(done: dict[str, dict[str, float]]) -> bool:
    modes = list(done)
    print("\n%-32s %s" % ("", " ".join("%14s" % ("atomic=%s" % MODES[m]) for m in modes)))
    for name in next(iter(done.values())):
        print("%-32s %s" % (name, " ".join("%14s" % done[m][name] for m in modes)))
    atomic = done.get("atomic")
    ok = atomic is None or (all(atomic[k] == 0 for k in JUDGED) and atomic["converged"] == 1)
    if "plain" in done:
        print("\nduplicates atomic=True prevents here: %d key rows doubled, %d counter "
              "increments too many (atomic=False)" % (done["plain"]["key rows doubled"],
                                                      done["plain"]["counter increments "
                                                                   "beyond jobs"]))
    return ok


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # clean up on SIGTERM too
    seed = opts.seed if opts.seed is not None else random.randrange(10**6)
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="delayq-atomic-chaos-"))
    (tmp / "redis").mkdir()
    redis = RedisServer(binaries()[0], dir=str(tmp / "redis")).start()  # no persistence
    db = make_database(opts, tmp)
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="bench.atomic_settings", CHAOS_DB=db,
               CHAOS_REDIS_URL=redis.url,
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("CHAOS_TICKS_DIR", None)
    run = Run(opts=opts, tmp=tmp, redis=redis, env=env)
    started = time.time()
    try:
        setup_django(env)
        print("atomic chaos run: %s, %d jobs, %d workers x %d threads, %d kills, one Redis "
              "restart without persistence, seed %d" % (opts.db, opts.jobs, opts.workers,
                                                         opts.concurrency, opts.kills, seed))
        done = {mode: one_mode(run, MODES[mode], rng) for mode in opts.modes}
        ok = report(done)
        print("wall time %.1f s; load average %.2f %.2f %.2f (%d cpus)" % (
            time.time() - started, *os.getloadavg(), os.cpu_count() or 0))
        print("logs and data:", "%s %s" % (tmp, db) if opts.keep else "(removed; --keep)")
        print("RESULT:", "PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        stop_workers(run)
        redis.cleanup()
        from django.db import connections

        connections.close_all()
        if not opts.keep:
            drop_database(db)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
