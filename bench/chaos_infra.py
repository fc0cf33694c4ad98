"""Set-up of the chaos run (``bench/chaos.py``) and of ``bench/kill_rerun.py``: Redis, the
database, Django, worker processes and what the harness knows of them (kills, pids)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
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
    last_seen: dict[int, float] = field(default_factory=dict)  # pid -> last seen alive
    proxy: Any = None  # scenario 3 on PostgreSQL: chaos_proxy.TcpProxy

    @property
    def runs_dir(self) -> str:
        return str(self.tmp / "runs")


# -- Redis, database, Django --------------------------------------------------------------

def start_redis(tmp: Path) -> RedisServer:
    data = tmp / "redis"
    data.mkdir()
    return RedisServer(binaries()[0], dir=str(data),
                       extra=["--appendonly", "yes", "--appendfsync", "everysec"]).start()


def _pg_admin():  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(host="127.0.0.1", port=5432, dbname="postgres", autocommit=True,
                           user=os.environ.get("PGUSER", "postgres"))


def make_database(opts: argparse.Namespace, tmp: Path) -> str:
    if opts.db == "sqlite":
        return "sqlite:%s" % (tmp / "chaos.sqlite3")
    name = "delayq_chaos_%d" % os.getpid()
    with _pg_admin() as conn:
        conn.execute("DROP DATABASE IF EXISTS %s" % name)
        conn.execute("CREATE DATABASE %s" % name)
    return "postgres:%s" % name


def drop_database(db: str) -> None:
    kind, _, name = db.partition(":")
    if kind == "postgres":
        with _pg_admin() as conn:
            conn.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)


def setup_django(env: dict[str, str]) -> None:
    os.environ.update(env)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from tests import jobs_chaos

    jobs_chaos.create_table()


def note(run: Run, what: str) -> None:
    with open(run.tmp / "timeline.log", "a") as f:
        f.write("%s %s\n" % (datetime.now(UTC).strftime("%H:%M:%S,%f")[:-3], what))


# -- workers ----------------------------------------------------------------------------

def start_worker(run: Run, *args: str, env: dict[str, str] | None = None
                 ) -> subprocess.Popen[bytes]:
    log = open(run.tmp / ("worker-%02d.log" % run.logs), "wb")
    run.logs += 1
    proc = subprocess.Popen([sys.executable, "-m", "django", "delayq_worker", "-v", "0", *args],
                            cwd=ROOT, env={**run.env, **(env or {})}, stdout=log,
                            stderr=subprocess.STDOUT)
    run.workers.append(proc)
    note(run, "worker %d started %s" % (proc.pid, " ".join(args)))
    return proc


def stop_procs(run: Run, procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM (they drain), SIGKILL what is left after 30 s; forget them."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p in run.workers:
            run.workers.remove(p)


def stop_workers(run: Run) -> None:
    stop_procs(run, list(run.workers))


def children(pid: int) -> list[int]:
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []


def processes_of(proc: subprocess.Popen[bytes]) -> int:
    """The N of ``--processes N`` in ``proc``'s command line, else 0 (a single process)."""
    args = [str(a) for a in proc.args]  # type: ignore[union-attr]
    return int(args[args.index("--processes") + 1]) if "--processes" in args else 0


def registered(procs: list[subprocess.Popen[bytes]], timeout: float) -> bool:
    """Whether each of ``procs`` (each of its children under ``--processes``) has
    heartbeated into the workers registry, waiting up to ``timeout`` seconds."""
    import json

    from django_delayq.core.connection import get_engine

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            infos = [json.loads(w.info or "{}") for w in get_engine().workers()]
        except Exception:  # noqa: BLE001 - Redis not answering yet: look again
            infos = []
        pids = {i.get("pid") for i in infos}
        sups = [str(i.get("supervisor") or "") for i in infos]
        if all((sum(":%d:sup-" % p.pid in s for s in sups) >= processes_of(p))
               if processes_of(p) else p.pid in pids for p in procs):
            return True
        time.sleep(0.2)
    return False


def kill(run: Run, pid: int, inflight: set[str] | None = None) -> None:
    os.kill(pid, signal.SIGKILL)
    run.events.append(Event("kill", time.time(), pid, inflight or set()))
    note(run, "SIGKILL %d" % pid)


class PidWatch:
    """Notes, every 0.1 s, which worker processes (and their children) are alive: the end
    of a run that never completed is its process's death (``Run.last_seen``)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="chaos-pids", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stop.wait(0.1):  # until the run ends (close())
            now = time.time()
            for p in list(self.run.workers):
                if p.poll() is None:
                    for pid in (p.pid, *children(p.pid)):
                        self.run.last_seen[pid] = now

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


# -- scheduling ----------------------------------------------------------------------------

def schedule_stamps(run: Run, count: int, start: datetime, seconds: float,
                    job_seconds: float = 0.0, **options: Any) -> list[str]:
    """``count`` runs of ``jobs_chaos.stamp`` due over ``seconds`` from ``start``."""
    from django_delayq.core.api import JobSpec, schedule_many

    specs = [JobSpec(args=(run.runs_dir, job_seconds),
                     at=start + timedelta(seconds=seconds * i / max(1, count)))
             for i in range(count)]
    ids: list[str] = []
    for i in range(0, len(specs), 2000):
        ids += schedule_many("tests.jobs_chaos.stamp", specs[i:i + 2000], **options)
    run.scheduled += count
    return ids
