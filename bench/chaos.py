"""The chaos run: schedule jobs, then kill workers, restart and wipe Redis; count losses.

    python bench/chaos.py [--jobs 10000] [--seconds 30] [--workers 4] [--db sqlite|postgres]

Loopback only. Starts its own redis-server (AOF on, ``appendfsync everysec``) on a free
port and its own database (a SQLite WAL file in a temp dir; ``--db postgres`` creates a
database on 127.0.0.1:5432), runs ``--workers`` ``manage.py delayq_worker`` processes
and schedules ``--jobs`` jobs due over ``--seconds`` (a tenth of them while Redis is
down: the outbox). Meanwhile it SIGKILLs a random worker every ~2 s and starts a new
one, restarts Redis once (SIGTERM: AOF flushed, nothing lost) and wipes it once
(FLUSHALL), then waits for every audit row to be final. Every execution of the job
function inserts a row into ``chaos_exec``. Exit 0 when: no job lost, every row
succeeded with an execution behind it, and every duplicate execution is explained by
a kill or by the wipe (see ``explain``).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.redis_server import RedisServer, binaries  # noqa: E402

QUEUE = "default"


@dataclass
class Event:
    kind: str  # "kill" | "wipe"
    at: float
    pid: int = 0
    inflight: set[str] = field(default_factory=set)


@dataclass
class Run:
    opts: argparse.Namespace
    tmp: Path
    redis: RedisServer
    env: dict[str, str]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    scheduled: int = 0
    logs: int = 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--seconds", type=float, default=30.0, help="due times spread over this")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--kill-every", type=float, default=2.0)
    p.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--converge-timeout", type=float, default=90.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, database)")
    return p.parse_args(argv)


# -- set-up ---------------------------------------------------------------------------

def start_redis(tmp: Path) -> RedisServer:
    data = tmp / "redis"
    data.mkdir()
    return RedisServer(binaries()[0], dir=str(data),
                       extra=["--appendonly", "yes", "--appendfsync", "everysec"]).start()


def make_database(opts: argparse.Namespace, tmp: Path) -> str:
    if opts.db == "sqlite":
        return "sqlite:%s" % (tmp / "chaos.sqlite3")
    import psycopg

    name = "delayq_chaos_%d" % os.getpid()
    with psycopg.connect(host="127.0.0.1", user=os.environ.get("PGUSER", "postgres"),
                         dbname="postgres", autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS %s" % name)
        conn.execute("CREATE DATABASE %s" % name)
    return "postgres:%s" % name


def drop_database(db: str) -> None:
    kind, _, name = db.partition(":")
    if kind != "postgres":
        return
    import psycopg

    with psycopg.connect(host="127.0.0.1", user=os.environ.get("PGUSER", "postgres"),
                         dbname="postgres", autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)


def setup_django(env: dict[str, str]) -> None:
    os.environ.update(env)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from tests import jobs_chaos

    jobs_chaos.create_table()


# -- workers --------------------------------------------------------------------------

def start_worker(run: Run) -> subprocess.Popen[bytes]:
    log = open(run.tmp / ("worker-%02d.log" % run.logs), "wb")
    run.logs += 1
    proc = subprocess.Popen([sys.executable, "-m", "django", "delayq_worker", "-v", "0"],
                            cwd=ROOT, env=run.env, stdout=log, stderr=subprocess.STDOUT)
    run.workers.append(proc)
    return proc


def inflight_ids(run: Run) -> set[str]:
    from django_delayq.core.connection import get_engine

    client = get_engine().client
    return {m.decode() for m in client.zrange(get_engine().keys(QUEUE).inflight, 0, -1)}


def kill_one(run: Run, rng: random.Random) -> None:
    alive = [p for p in run.workers if p.poll() is None]
    if not alive:
        start_worker(run)
        return
    victim = rng.choice(alive)
    try:
        inflight = inflight_ids(run)
    except Exception:  # noqa: BLE001 - Redis may be restarting: an empty snapshot
        inflight = set()
    victim.send_signal(signal.SIGKILL)
    run.events.append(Event("kill", time.time(), victim.pid, inflight))
    note(run, "SIGKILL %d" % victim.pid)
    victim.wait()
    run.workers.remove(victim)
    start_worker(run)


def stop_workers(run: Run) -> None:
    for p in run.workers:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in run.workers:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# -- scheduling, faults -----------------------------------------------------------------

def schedule_spread(count: int, start: datetime, seconds: float) -> int:
    from django_delayq.core.api import JobSpec, schedule_many

    specs = [JobSpec(at=start + timedelta(seconds=seconds * i / max(1, count)))
             for i in range(count)]
    for i in range(0, len(specs), 2000):
        schedule_many("tests.jobs_chaos.record", specs[i:i + 2000], max_attempts=25)
    return count


def note(run: Run, what: str) -> None:
    with open(run.tmp / "timeline.log", "a") as f:
        f.write("%s %s\n" % (datetime.now(UTC).strftime("%H:%M:%S,%f")[:-3], what))


def restart_redis(run: Run, outbox_jobs: int) -> None:
    """SIGTERM (AOF flushed), schedule jobs while it is down, start it again."""
    note(run, "redis stop")
    run.redis.stop()
    now = datetime.now(UTC)
    run.scheduled += schedule_spread(outbox_jobs, now + timedelta(seconds=1), 4.0)
    time.sleep(1.0)
    run.redis.start()
    note(run, "redis started")


def wipe_redis(run: Run) -> None:
    from django_delayq.core.connection import get_engine

    engine = get_engine()
    pipe = engine.client.pipeline(transaction=True)  # snapshot and wipe atomically
    pipe.zrange(engine.keys(QUEUE).inflight, 0, -1)
    pipe.flushall()
    inflight, _ = pipe.execute()
    run.events.append(Event("wipe", time.time(), 0, {m.decode() for m in inflight}))
    note(run, "wipe (%d in flight)" % len(inflight))


def chaos_phase(run: Run, t_end: float, rng: random.Random) -> None:
    span = t_end - time.time()
    restart_at, wipe_at = time.time() + span / 3, time.time() + 2 * span / 3
    next_kill = time.time() + run.opts.kill_every
    outbox = run.opts.jobs // 10
    while time.time() < t_end:
        now = time.time()
        if restart_at and now >= restart_at:
            restart_at = 0
            restart_redis(run, outbox)
        elif wipe_at and now >= wipe_at:
            wipe_at = 0
            wipe_redis(run)
        elif now >= next_kill:
            kill_one(run, rng)
            next_kill = now + run.opts.kill_every * rng.uniform(0.75, 1.25)
        time.sleep(0.05)


def converge(timeout: float) -> float:
    from django_delayq.models import LIVE_STATUSES, Job

    started = time.time()
    while Job.objects.filter(status__in=LIVE_STATUSES).exists():
        if time.time() - started > timeout:
            break
        time.sleep(0.5)
    return time.time() - started


# -- analysis ---------------------------------------------------------------------------

def cut_off(e: Event, job_id: str, execs: list[tuple[int, float]], final_pid: int,
            recoveries: list[float]) -> bool:
    """An execution before event ``e`` whose outcome ``e`` kept from the audit row.

    Kill of pid P: P had run the job and P's success is not what the row says (P died
    before the ack or before the audit flush). Wipe: the job was in flight at the wipe,
    or ran before it and the row's success is a later run. Either way no lease had been
    recovered in between (that would be a stalled worker, not this event).
    """
    if e.kind == "wipe" and job_id in e.inflight:
        return True
    for pid, ts in execs:
        if ts > e.at or (e.kind == "kill" and (pid != e.pid or final_pid == e.pid)):
            continue
        if e.kind == "wipe" and (pid, ts) == execs[-1]:
            continue
        if not any(ts < r < e.at for r in recoveries):
            return True
    return False


def explain(job_id: str, execs: list[tuple[int, float]], events: list[Event],
            final_pid: int, recoveries: list[float]) -> str | None:
    """Why a job ran more than once: "kill" or "wipe", or None (unexplained)."""
    for e in events:
        if cut_off(e, job_id, execs, final_pid, recoveries):
            return e.kind
    return None


def pid_of(worker_id: str) -> int:
    parts = worker_id.split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else 0


def analyse(run: Run) -> dict[str, Any]:
    from django_delayq.models import Job, JobAttempt, JobStatus
    from django_delayq.worker.recovery import LOST_LEASE
    from tests import jobs_chaos

    by_job: dict[str, list[tuple[int, float]]] = {}
    for job_id, _attempt, pid, ts, _tag in jobs_chaos.executions():
        by_job.setdefault(job_id, []).append((pid, ts))
    rows = dict(Job.objects.values_list("id", "status"))
    final = {j: pid_of(w) for j, w in Job.objects.values_list("id", "worker_id")}
    recoveries: dict[str, list[float]] = {}
    for j, at in JobAttempt.objects.filter(error=LOST_LEASE).values_list("job_id",
                                                                         "finished_at"):
        recoveries.setdefault(j, []).append(at.timestamp())
    not_final = [j for j, s in rows.items() if s != JobStatus.SUCCEEDED]
    untrue = [j for j, s in rows.items() if s == JobStatus.SUCCEEDED and j not in by_job]
    dups = {j: e for j, e in by_job.items() if len(e) > 1}
    reasons = [explain(j, e, run.events, final[j], recoveries.get(j, []))
               for j, e in dups.items()]
    kills = [e for e in run.events if e.kind == "kill"]
    return {
        "scheduled": run.scheduled, "rows": len(rows),
        "succeeded": sum(1 for s in rows.values() if s == JobStatus.SUCCEEDED),
        "lost": len([j for j in rows if j not in by_job]) + (run.scheduled - len(rows)),
        "not_final": len(not_final), "untrue": len(untrue),
        "dup_jobs": len(dups), "dup_executions": sum(len(e) - 1 for e in dups.values()),
        "dup_kill": reasons.count("kill"), "dup_wipe": reasons.count("wipe"),
        "dup_unexplained": reasons.count(None), "kills": len(kills),
        "max_inflight_at_kill": max((sum(cut_off(e, j, x, final.get(j, 0), recoveries.get(j, []))
                                         for j, x in by_job.items()) for e in kills), default=0),
        "max_redis_inflight_at_kill": max((len(e.inflight) for e in kills), default=0),
        "inflight_at_wipe": sum(len(e.inflight) for e in run.events if e.kind == "wipe"),
        "sample_unexplained": [j for j, r in zip(dups, reasons) if r is None][:5],
    }


def report(r: dict[str, Any], elapsed: float, converge_s: float) -> bool:
    ok = (r["lost"] == 0 and r["not_final"] == 0 and r["untrue"] == 0
          and r["dup_unexplained"] == 0 and r["rows"] == r["scheduled"])
    lines = [
        ("jobs scheduled", r["scheduled"]),
        ("jobs succeeded per audit", r["succeeded"]),
        ("jobs lost", r["lost"]),
        ("audit rows not final", r["not_final"]),
        ("audit rows succeeded without an execution", r["untrue"]),
        ("duplicate executions", "%d (%d jobs: %d in flight at a kill, %d around the wipe, "
                                 "%d unexplained)" % (r["dup_executions"], r["dup_jobs"],
                                                      r["dup_kill"], r["dup_wipe"],
                                                      r["dup_unexplained"])),
        ("workers SIGKILLed", r["kills"]),
        ("largest number of jobs in flight at a kill (run, not settled)",
         r["max_inflight_at_kill"]),
        ("largest in-flight set in Redis at a kill (all workers)",
         r["max_redis_inflight_at_kill"]),
        ("jobs in flight at the wipe", r["inflight_at_wipe"]),
        ("converged after the chaos in", "%.1f s" % converge_s),
        ("wall time", "%.1f s" % elapsed),
    ]
    for name, value in lines:
        print("%-55s %s" % (name, value))
    if r["sample_unexplained"]:
        print("unexplained duplicates, e.g.:", " ".join(r["sample_unexplained"]))
    print("RESULT:", "PASS" if ok else "FAIL")
    return ok


# -- main -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    rng = random.Random(opts.seed)
    tmp = Path(tempfile.mkdtemp(prefix="delayq-chaos-"))
    started = time.time()
    redis = start_redis(tmp)
    db = make_database(opts, tmp)
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="bench.chaos_settings", CHAOS_DB=db,
               CHAOS_REDIS_URL=redis.url,
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = Run(opts=opts, tmp=tmp, redis=redis, env=env)
    try:
        setup_django(env)
        for _ in range(opts.workers):
            start_worker(run)
        first_due = datetime.now(UTC) + timedelta(seconds=2)
        run.scheduled += schedule_spread(opts.jobs - opts.jobs // 10, first_due, opts.seconds)
        chaos_phase(run, first_due.timestamp() + opts.seconds, rng)
        converge_s = converge(opts.converge_timeout)
        stop_workers(run)
        ok = report(analyse(run), time.time() - started, converge_s)
        print("logs and data:", "%s %s" % (tmp, db) if opts.keep else "(removed; --keep)")
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
