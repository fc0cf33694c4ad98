"""The phases every system goes through, written once: each peer module supplies a
``System`` (how to enqueue, how to start its worker) and calls :func:`main`.

Phases (one per process run by ``run.py``, Redis flushed in between):

- ``enqueue``: ``n`` jobs one call at a time, then ``4n`` with the bulk API, all due in 1 h;
- ``drain``: ``n`` jobs already due, then ONE worker process; jobs/s from the first to the
  last recorded execution;
- ``lateness``: an idle worker, then ``n`` jobs due uniformly over ``spread`` seconds;
  start - due of every execution;
- ``memory``: ``INFO memory`` ``used_memory`` delta per job for ``n`` jobs due in 1 h;
- ``kill``: ``n`` jobs already due, ONE worker, SIGKILL to its process group once a fifth
  of them ran, then a fresh worker: how long the jobs caught by the kill took to run
  again, how many never ran (within 60 s) and how many ran twice.

The drain also reports the worker's CPU time per job (every process of its group, from
/proc) and run.py adds Redis's own time per job (``INFO commandstats``).

Every job records "<due_ms> <start_ms>" with :mod:`recorder`, whatever the system.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import recorder

HERE = Path(__file__).resolve().parent


class System(Protocol):
    name: str
    warmup_s: float  # idle time given to a fresh worker before the lateness jobs are sent

    def setup(self, url: str, workdir: Path) -> None: ...
    def describe(self, concurrency: int) -> dict[str, str]: ...
    def enqueue_one(self, due_ms: list[int]) -> float | None: ...  # float: seconds it timed
    def enqueue_bulk(self, due_ms: list[int]) -> bool | float: ...  # False: no bulk API
    def enqueue_due(self, due_ms: list[int]) -> None: ...  # jobs runnable now (drain)
    def worker(self, concurrency: int) -> tuple[list[str], dict[str, str]]: ...


@dataclass
class Worker:
    """A worker process in its own session, always stopped (process group) on exit."""

    argv: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = field(default=None)

    def __enter__(self) -> Worker:
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(self.argv, env=self.env, cwd=HERE, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
                os.killpg(self.proc.pid, signal.SIGKILL)  # leftovers of its group
            except (subprocess.TimeoutExpired, ProcessLookupError):
                continue
            break


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_records(path: str, n: int, timeout_s: float, worker: Worker | None = None) -> int:
    deadline = time.monotonic() + timeout_s
    seen = 0
    while time.monotonic() < deadline:
        seen = recorder.count(path)
        if seen >= n or (worker is not None and not worker.alive()):
            return seen
        time.sleep(0.1)
    return seen


def _worker(system: System, concurrency: int, workdir: Path, record: str) -> Worker:
    argv, env = system.worker(concurrency)
    env = dict(os.environ, **env, BENCH_RECORD=record,
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    return Worker(argv, env, workdir / ("%s-worker.log" % system.name))


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of every live process in process group ``pgid``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields[0] is the state: pgrp is the 5th stat field
            total += int(fields[11]) + int(fields[12])
    return total / tick


def _timed(call: Any, due_ms: list[int]) -> float | None:
    """Seconds ``call`` took (or reported itself, e.g. timed inside Node); None: no API."""
    t0 = time.perf_counter()
    spent = call(due_ms)
    if spent is False:
        return None
    return spent if isinstance(spent, float) else time.perf_counter() - t0


def phase_enqueue(system: System, n: int, **_: Any) -> dict[str, Any]:
    due = now_ms() + 3_600_000
    one = _timed(system.enqueue_one, [due] * n)
    bulk = _timed(system.enqueue_bulk, [due] * (4 * n))
    return {"enqueue_one_jobs_per_s": round(n / one) if one else None,
            "enqueue_bulk_jobs_per_s": round(4 * n / bulk) if bulk else None}


def phase_drain(system: System, n: int, concurrency: int, workdir: Path,
                record: str, **_: Any) -> dict[str, Any]:
    system.enqueue_due(list(range(n)))  # the argument is a serial number here: spots repeats
    with _worker(system, concurrency, workdir, record) as w:
        seen = wait_records(record, n, 60 + n / 100, w)
        cpu = group_cpu_s(w.proc.pid) if w.proc is not None else float("nan")
        time.sleep(1.0)  # a late duplicate would show up now
    rows = recorder.read(record)
    starts = sorted(start for _, start in rows[:n])
    span_s = (starts[-1] - starts[0]) / 1000 if len(starts) > 1 else float("nan")
    return {"drain_jobs": len(starts), "drain_expected": n, "drain_complete": seen >= n,
            "drain_duplicates": len(rows) - len({due for due, _ in rows}),
            "drain_jobs_per_s": round(len(starts) / span_s) if span_s > 0 else None,
            "worker_cpu_us_per_job": round(cpu * 1e6 / max(1, len(starts)))}


def phase_kill(system: System, n: int, concurrency: int, workdir: Path,
               record: str, **_: Any) -> dict[str, Any]:
    """SIGKILL the worker mid-drain, start a fresh one: the jobs caught by the kill (not
    run yet, serial below the highest that ran) are timed from the kill to their run."""
    system.enqueue_due(list(range(n)))
    with _worker(system, concurrency, workdir, record) as w:
        while recorder.count(record) < n // 5 and w.alive():
            time.sleep(0.002)
        assert w.proc is not None
        os.killpg(w.proc.pid, signal.SIGKILL)
        killed_ms = now_ms()
        w.proc.wait()
    before = recorder.read(record)
    ran = {due for due, _ in before}
    caught = {s for s in range(int(max(ran, default=-1))) if s not in ran}
    with _worker(system, concurrency, workdir, record) as w:
        deadline = time.monotonic() + 60 + n / 100
        while time.monotonic() < deadline and w.alive():
            if len({due for due, _ in recorder.read(record)}) >= n:
                break
            time.sleep(0.1)
        time.sleep(1.0)  # a late duplicate would show up now
    rows = recorder.read(record)
    after = rows[len(before):]
    rerun = sorted(start - killed_ms for due, start in after if due in caught)
    done = {due for due, _ in rows}
    return {"kill_jobs": n, "kill_ran_before": len(ran), "kill_caught": len(caught),
            "kill_lost": n - len(done), "kill_duplicates": len(rows) - len(done),
            "kill_caught_never_ran": len(caught - {due for due, _ in after}),
            "kill_rerun_p50_ms": round(pct(rerun, 50)) if rerun else None,
            "kill_rerun_max_ms": round(max(rerun)) if rerun else None,
            "kill_all_done_s": round((max(s for _, s in rows) - killed_ms) / 1000, 2)
            if len(done) >= n else None}


def phase_lateness(system: System, n: int, spread: float, concurrency: int, workdir: Path,
                   record: str, **_: Any) -> dict[str, Any]:
    with _worker(system, concurrency, workdir, record) as w:
        time.sleep(system.warmup_s)
        first = now_ms() + int(getattr(system, "lead_s", 3.0) * 1000)
        dues = [first + int(spread * 1000 * i / n) for i in range(n)]
        if system.enqueue_bulk(dues) is False:
            system.enqueue_one(dues)
        overran = now_ms() > first
        wait_records(record, n, spread + 30, w)
        time.sleep(0.5)
    rows = recorder.read(record)
    late = [start - due for due, start in rows]
    if not late:
        return {"lateness_jobs": 0}
    return {"lateness_jobs": len(late), "lateness_expected": n, "lateness_overran": overran,
            "lateness_duplicates": len(rows) - len({due for due, _ in rows}),
            **{"lateness_%s_ms" % k: round(pct(late, p), 2)
               for k, p in (("p50", 50), ("p95", 95), ("p99", 99), ("max", 100))}}


def used_memory(url: str) -> int:
    import redis

    return int(redis.Redis.from_url(url).info("memory")["used_memory"])


def phase_memory(system: System, n: int, url: str, **_: Any) -> dict[str, Any]:
    warm = [now_ms() + 3_600_000]  # connections, script caches, queue registries
    if system.enqueue_bulk(warm) is False:
        system.enqueue_one(warm)
    before = used_memory(url)
    dues = [now_ms() + 3_600_000] * n
    if system.enqueue_bulk(dues) is False:
        system.enqueue_one(dues)
    after = used_memory(url)
    return {"memory_jobs": n, "memory_bytes_per_job": round((after - before) / n, 1)}


PHASES: dict[str, Callable[..., dict[str, Any]]] = {
    "enqueue": phase_enqueue, "drain": phase_drain, "lateness": phase_lateness,
    "memory": phase_memory, "kill": phase_kill}


def main(system: System) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=[*PHASES, "describe"])
    p.add_argument("--redis", required=True)
    p.add_argument("--workdir", required=True, type=Path)
    p.add_argument("-n", type=int, default=1000)
    p.add_argument("--spread", type=float, default=10.0)
    p.add_argument("--concurrency", type=int, default=4)
    opts = p.parse_args()
    opts.workdir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))  # run.py's timeout: clean up
    system.setup(opts.redis, opts.workdir)
    if opts.phase == "describe":
        out: dict[str, Any] = system.describe(opts.concurrency)
    else:
        record = str(opts.workdir / ("%s-%s.rec" % (system.name, opts.phase)))
        if os.path.exists(record):
            os.unlink(record)
        out = PHASES[opts.phase](system, n=opts.n, spread=opts.spread,
                                 concurrency=opts.concurrency, workdir=opts.workdir,
                                 record=record, url=opts.redis)
        after = getattr(system, "after", None)
        if after is not None:
            after(opts.phase, out)
    print("RESULT " + json.dumps(out), flush=True)
    return 0
