"""The scenarios of the chaos run (``bench/chaos.py``): each starts its workers (they take
over from the previous scenario's, which are stopped once the new ones heartbeat),
schedules ``jobs_chaos.stamp`` jobs (each run appends its start and its completion to a
file) and injects its faults. Every wait is bounded in time."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from chaos_infra import (
    QUEUE,
    Event,
    Run,
    kill,
    note,
    registered,
    schedule_stamps,
    start_worker,
    stop_procs,
)

THREADS = ("--concurrency", "4")


@dataclass
class Scenario:
    number: int
    key: str
    title: str
    ids: list[str] = field(default_factory=list)  # jobs that must succeed
    special: dict[str, str] = field(default_factory=dict)  # job id -> its expected status
    outage: float = 0.0  # seconds of the fault that stop every job (and tick)
    outages: list[tuple[float, float]] = field(default_factory=list)  # when (time.time())
    t0: float = 0.0
    t1: float = 0.0
    converge_s: float = 0.0
    figures: list[tuple[str, object]] = field(default_factory=list)  # its own figures
    ok: bool = True  # its own criteria


def lease(run: Run) -> float:
    from django_delayq.core.conf import get_settings

    return get_settings().lease_seconds


def due(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def switch(run: Run, *specs: tuple[tuple[str, ...], dict[str, str] | None]
           ) -> list[subprocess.Popen[bytes]]:
    """Start the scenario's workers; once they heartbeat, stop the previous ones (so the
    periodic schedule always has a worker)."""
    old = list(run.workers)
    new = [start_worker(run, *args, env=env) for args, env in specs]
    if not registered(new, 60):
        note(run, "new workers not all registered after 60 s")
    stop_procs(run, old)
    return new


def sleep_until(t: float) -> None:
    time.sleep(max(0.0, min(t - time.time(), 600.0)))


def job_started(run: Run, job_id: str, timeout: float) -> bool:
    from tests import jobs_chaos

    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(r["job"] == job_id for r in jobs_chaos.stamped_runs(run.runs_dir)):
            return True
        time.sleep(0.1)
    return False


# -- 1: thread-mode workers SIGKILLed, Redis restarted and wiped ---------------------------

def inflight_ids() -> set[str]:
    from django_delayq.core.connection import get_engine

    engine = get_engine()
    return {m.decode() for m in engine.client.zrange(engine.keys(QUEUE).inflight, 0, -1)}


def kill_worker(run: Run, rng: random.Random) -> None:
    alive = [p for p in run.workers if p.poll() is None]
    if alive:
        victim = rng.choice(alive)
        try:
            inflight = inflight_ids()
        except Exception:  # noqa: BLE001 - Redis may be restarting: an empty snapshot
            inflight = set()
        kill(run, victim.pid, inflight)
        victim.wait()
        run.workers.remove(victim)
    start_worker(run, *THREADS)


def wipe_redis(run: Run) -> int:
    from django_delayq.core.connection import get_engine

    engine = get_engine()
    pipe = engine.client.pipeline(transaction=True)  # snapshot and wipe atomically
    pipe.zrange(engine.keys(QUEUE).inflight, 0, -1)
    pipe.flushall()
    inflight, _ = pipe.execute()
    run.events.append(Event("wipe", time.time(), 0, {m.decode() for m in inflight}))
    note(run, "wipe (%d in flight)" % len(inflight))
    return len(inflight)


def loaded(run: Run, timeout: float) -> bool:
    """Wait until the restarted Redis has loaded its data (it answers INFO at once, but
    refuses every command on the data with LOADING until then): the outage lasts until
    it serves the queue again."""
    import redis

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with run.redis.client() as client:
                client.ping()
                return True
        except redis.ConnectionError:  # LOADING is one
            time.sleep(0.05)
    note(run, "redis still loading after %g s" % timeout)
    return False


def kills(run: Run, sc: Scenario, rng: random.Random) -> None:
    o = run.opts
    switch(run, *[(THREADS, None)] * o.workers)
    first = due(2)
    outbox = o.jobs // 10
    sc.ids += schedule_stamps(run, o.jobs - outbox, first, o.seconds, max_attempts=25)
    t_end = first.timestamp() + o.seconds
    span = t_end - time.time()
    restart_at, wipe_at = time.time() + span / 3, time.time() + 2 * span / 3
    next_kill, kills_done, at_wipe = time.time() + o.kill_every, 0, 0
    while time.time() < t_end:
        now = time.time()
        if restart_at and now >= restart_at:  # SIGTERM (AOF flushed): nothing lost
            restart_at = 0
            note(run, "redis stop")
            run.redis.stop()
            sc.ids += schedule_stamps(run, outbox, due(1), 4.0, max_attempts=25)  # outbox
            time.sleep(1.0)
            run.redis.start()
            loaded(run, 60)
            sc.outage += time.time() - now
            sc.outages.append((now, time.time()))
            note(run, "redis started")
        elif wipe_at and now >= wipe_at:
            wipe_at = 0
            at_wipe = wipe_redis(run)
        elif now >= next_kill:
            kill_worker(run, rng)
            kills_done += 1
            next_kill = now + o.kill_every * rng.uniform(0.75, 1.25)
        time.sleep(0.05)
    sc.figures += [("workers SIGKILLed", kills_done),
                   ("jobs scheduled while Redis was down (outbox)", outbox),
                   ("Redis down for its restart", "%.1f s" % sc.outage),
                   ("jobs in flight at the wipe", at_wipe)]


# -- 2: process mode, children SIGKILLed ------------------------------------------------------

def processes(run: Run, sc: Scenario, rng: random.Random) -> None:
    o = run.opts
    sups = switch(run, *[(("--processes", "2", *THREADS), None)] * 2)
    start = due(1)
    sc.ids += schedule_stamps(run, o.jobs_each, start, o.spread, job_seconds=0.2,
                              max_attempts=25, backoff=[1])
    t_end, next_kill, killed = start.timestamp() + o.spread, time.time() + 2, 0
    while time.time() < t_end:
        if time.time() >= next_kill:
            kids = [k for s in sups for k in _children(s)]
            if kids:
                kill(run, rng.choice(kids))
                killed += 1
            next_kill = time.time() + o.child_kill_every * rng.uniform(0.75, 1.25)
        time.sleep(0.05)
    sc.figures.append(("children SIGKILLed", killed))


def _children(proc: subprocess.Popen[bytes]) -> list[int]:
    from chaos_infra import children

    return children(proc.pid) if proc.poll() is None else []


# -- 3: the database unreachable for longer than two leases ----------------------------------

def db_outage(run: Run, sc: Scenario, rng: random.Random) -> None:
    o, span = run.opts, 2 * lease(run) + 2
    proxy = run.proxy
    env = {"PGPORT": str(proxy.port)} if proxy is not None else None
    switch(run, (THREADS, env), (THREADS, env))
    sc.ids += schedule_stamps(run, o.jobs_each, due(1), o.spread, job_seconds=0.1,
                              max_attempts=25, backoff=[1])
    time.sleep(2.0)
    note(run, "database outage")
    started = time.time()
    if proxy is not None:  # every connection to PostgreSQL reset, new ones refused
        proxy.cut()
        try:
            time.sleep(span)  # the outage itself: a fixed span is the fault
        finally:
            proxy.restore()
        how = "proxy cut (%d connections reset, %d refused)" % (proxy.cut_open, proxy.refused)
    else:  # SQLite: an exclusive lock on the file (in WAL mode readers still read)
        path = run.env["CHAOS_DB"].partition(":")[2]
        lock = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            started = time.time()
            time.sleep(span)  # the outage itself
            lock.execute("ROLLBACK")
        finally:
            lock.close()
        how = "BEGIN EXCLUSIVE held"
    sc.outage = time.time() - started
    sc.outages.append((started, time.time()))
    note(run, "database back")
    sc.figures.append(("database outage", "%.1f s, %s (lease %g s)" % (sc.outage, how,
                                                                        lease(run))))


# -- 4: Redis SIGSTOPped past the lease ---------------------------------------------------------

def redis_stop(run: Run, sc: Scenario, rng: random.Random) -> None:
    o, span = run.opts, lease(run) + 3
    switch(run, (THREADS, None), (THREADS, None))
    sc.ids += schedule_stamps(run, o.jobs_each, due(1), o.spread, job_seconds=0.1,
                              max_attempts=25, backoff=[1])
    time.sleep(2.0)
    assert run.redis.proc is not None
    pid = run.redis.proc.pid
    note(run, "redis SIGSTOP")
    started = time.time()
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(span)  # the stall itself: a fixed span is the fault
    finally:
        os.kill(pid, signal.SIGCONT)
    sc.outage = time.time() - started
    sc.outages.append((started, time.time()))
    note(run, "redis SIGCONT")
    sc.figures.append(("Redis stopped", "%.1f s (lease %g s)" % (sc.outage, lease(run))))


# -- 5: SIGKILL and restart under the same --worker-id ----------------------------------------

def same_id(run: Run, sc: Scenario, rng: random.Random) -> None:
    o = run.opts
    fixed = ("--worker-id", "chaos-fixed", *THREADS)
    proc = switch(run, (fixed, None), (THREADS, None))[0]
    start = due(1)
    sc.ids += schedule_stamps(run, o.jobs_each, start, o.spread, job_seconds=0.1,
                              max_attempts=25, backoff=[1])
    restarts = 3
    for k in range(restarts):
        sleep_until(start.timestamp() + 1 + k * o.spread / restarts)
        kill(run, proc.pid)
        proc.wait()
        run.workers.remove(proc)
        proc = start_worker(run, *fixed)
    sc.figures.append(("SIGKILLs, each restarted under --worker-id chaos-fixed", restarts))


# -- 6: a cancel and a hard time limit beside other jobs, --processes 1 -------------------------

def cancel_limit(run: Run, sc: Scenario, rng: random.Random) -> None:
    from django_delayq.core.api import cancel, schedule

    o = run.opts
    switch(run, (("--processes", "1", *THREADS), None))
    sc.ids += schedule_stamps(run, o.jobs_each, due(1), o.spread, job_seconds=0.05,
                              max_attempts=25, backoff=[1])
    job = "tests.jobs_chaos.stamp"
    doomed = schedule(job, run.runs_dir, 60.0, delay=2, max_attempts=3).id
    limited = schedule(job, run.runs_dir, 60.0, delay=3, timeout=3, max_attempts=2,
                       backoff=[1]).id
    sc.special = {doomed: "cancelled", limited: "dead"}
    run.scheduled += 2
    outcome = "its job never started"
    if job_started(run, doomed, 30):
        time.sleep(0.5)
        outcome = cancel(doomed).name
        note(run, "cancel %s: %s" % (doomed, outcome))
    sc.figures.append(("cancel of the running job", outcome))
    sc.ok = outcome == "ALREADY_RUNNING"


def cancel_limit_figures(run: Run, sc: Scenario, runs: list[dict[str, object]]) -> None:
    """After it converged: how the two jobs ended, and the other jobs of their processes."""
    from django_delayq.models import Job, JobAttempt

    doomed, limited = list(sc.special)
    rows = {r.pk: r for r in Job.objects.filter(pk__in=[doomed, limited])}
    lim = rows.get(limited)
    timeouts = JobAttempt.objects.filter(job_id=limited,
                                         error_type__endswith=".JobTimeout").count()
    killed = {r["pid"] for r in runs if r["job"] in sc.special and r["end"] is None}
    beside = [r for r in runs if r["pid"] in killed and r["job"] not in sc.special]
    cut = [r for r in beside if r["end"] is None]
    sc.figures += [
        ("cancelled job ends", rows[doomed].status if doomed in rows else "no row"),
        ("time-limited job ends", "%s, %d attempts, %d timed out" % (
            lim.status if lim else "no row", lim.attempts if lim else 0, timeouts)),
        ("other jobs run by the killed processes", len(beside)),
        ("... of them cut short", len(cut))]
    sc.ok = sc.ok and not cut and timeouts == 2 and lim is not None and lim.attempts == 2


SCENARIOS: dict[int, tuple[str, str, Callable[[Run, Scenario, random.Random], None]]] = {
    1: ("kills", "workers SIGKILLed, Redis restarted and wiped", kills),
    2: ("processes", "--processes 2: children SIGKILLed", processes),
    3: ("db-outage", "database unreachable for over two leases", db_outage),
    4: ("redis-stop", "Redis SIGSTOPped past the lease", redis_stop),
    5: ("same-id", "SIGKILL, restart under the same --worker-id", same_id),
    6: ("cancel-limit", "cancel and hard time limit, --processes 1", cancel_limit),
}
