#!/usr/bin/env python
"""What the event stream costs a ``schedule()`` call: each thread's CPU and context
switches per call, events on and off in turn.

    python bench/schedule_path_threads.py [-n 3000] [--rounds 5] [--sparse 0] [--gap-ms 100]
                                          [--db sqlite|postgres] [--json]

``-n`` calls of ``schedule()`` one at a time, in autocommit (as a view does) and in one
transaction, with ``DELAYQ["EVENTS"]`` on and off (``override_settings``), the four taking
turns round after round. For each: the CPU µs per call of this process's main thread, of
the event stream's thread (``delayq-events``) and of any other thread, from
``/proc/self/task/<tid>/schedstat`` (nanoseconds on the CPU), and the context switches per
call of each (``voluntary_ctxt_switches`` + ``nonvoluntary_ctxt_switches`` of
``/proc/self/task/<tid>/status``). Each loop ends with ``events.flush()`` (with events on),
so the events of its calls are written and counted in it; the time the stream's thread
then needs to go back to sleep is counted too. With ``--sparse S``, also
``S`` autocommit calls ``--gap-ms`` apart (a web process's calls, each finding the stream
idle; the loop then waits 0.3 s for the thread's last flush). Printed: the median of the
rounds, and ``event_*``: on minus off, what an event costs a call.

Starts its own redis-server; SQLite in a temporary directory (bench_settings) or
PostgreSQL (``delayq_bench_schedule_threads``, created fresh). Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from schedule_path import bench_session  # noqa: E402


def _task(tid: int) -> tuple[int, int]:
    """(ns on the CPU, context switches) of thread ``tid`` of this process."""
    base = Path("/proc/self/task/%d" % tid)
    try:
        ns = int((base / "schedstat").read_text().split()[0])
        switches = sum(int(line.split()[-1]) for line in
                       (base / "status").read_text().splitlines() if "ctxt_switches:" in line)
    except FileNotFoundError:  # the thread ended
        return 0, 0
    return ns, switches


def _threads() -> dict[str, tuple[int, int]]:
    """Per thread group (main, events, other): (ns, switches), summed."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, list[int]] = {"main": [0, 0], "events": [0, 0], "other": [0, 0]}
    main = threading.main_thread().native_id
    for entry in Path("/proc/self/task").iterdir():
        tid = int(entry.name)
        group = ("main" if tid == main else "events" if names.get(tid) == "delayq-events"
                 else "other")
        ns, sw = _task(tid)
        out[group][0] += ns
        out[group][1] += sw
    return {k: (v[0], v[1]) for k, v in out.items()}


def _loop(n: int, one_tx: bool, events_on: bool, start: int,
          gap: float = 0.0) -> dict[str, float]:
    from django.db import transaction

    from django_delayq import schedule
    from django_delayq.core import events

    before = _threads()
    if gap:
        for i in range(start, start + n):
            schedule("bench_jobs.noop", i, delay=3600)
            time.sleep(gap)  # calls far apart, as a web process makes them
        time.sleep(0.3)  # the last event's flush, by the stream's own thread
    elif one_tx:
        with transaction.atomic():
            for i in range(start, start + n):
                schedule("bench_jobs.noop", i, delay=3600)
    else:
        for i in range(start, start + n):
            schedule("bench_jobs.noop", i, delay=3600)
    if events_on:
        events.flush()
    after = _threads()
    out: dict[str, float] = {}
    for group in ("main", "events", "other"):
        # a thread that ended took its counts along: never below zero
        out[group + "_cpu_us"] = max(0, after[group][0] - before[group][0]) / n / 1e3
        out[group + "_switches"] = max(0, after[group][1] - before[group][1]) / n
    out["cpu_us"] = sum(out[g + "_cpu_us"] for g in ("main", "events", "other"))
    out["switches"] = sum(out[g + "_switches"] for g in ("main", "events", "other"))
    return out


def measure(n: int, rounds: int, sparse: int, gap_ms: float) -> dict[str, Any]:
    from django.conf import settings
    from django.test import override_settings

    off = override_settings(DELAYQ={**settings.DELAYQ, "EVENTS": False})
    modes = ["autocommit", "one_transaction"] + (["sparse"] if sparse else [])
    cases = {"%s_events_%s" % (mode, state): (mode, state == "on")
             for mode in modes for state in ("on", "off")}
    seen: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    start = 0
    for r in range(rounds + 1):  # round 0: warm-up
        for name, (mode, events_on) in cases.items():
            if not events_on:
                off.enable()
            calls = (sparse if mode == "sparse" else n) if r else 50
            gap = gap_ms / 1e3 if mode == "sparse" else 0.0
            try:
                got = _loop(calls, mode == "one_transaction", events_on, start, gap)
            finally:
                if not events_on:
                    off.disable()
            start += n
            if r:
                seen[name].append(got)
    out: dict[str, Any] = {}
    for name, runs in seen.items():
        out[name] = {k: round(statistics.median(run[k] for run in runs), 2) for k in runs[0]}
    for mode in modes:
        on, off_ = out[mode + "_events_on"], out[mode + "_events_off"]
        out["event_" + mode] = {k: round(on[k] - off_[k], 2) for k in on}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--sparse", type=int, default=0,
                   help="also this many autocommit calls --gap-ms apart")
    p.add_argument("--gap-ms", type=float, default=100.0)
    p.add_argument("--json", action="store_true")
    opts = p.parse_args()
    with bench_session("delayq-threads-", opts.db, "delayq_bench_schedule_threads"):
        out: dict[str, Any] = {"db": opts.db, "n": opts.n, "rounds": opts.rounds,
                               "load_before": os.getloadavg()[0]}
        out.update(measure(opts.n, opts.rounds, opts.sparse, opts.gap_ms))
        out["load_after"] = os.getloadavg()[0]
    if opts.json:
        print(json.dumps(out))
    else:
        for name, value in out.items():
            if isinstance(value, dict):
                print("%-30s %s" % (name, "  ".join("%s %.2f" % kv for kv in value.items())))
            else:
                print("%-30s %s" % (name, value))
    return 0


if __name__ == "__main__":
    sys.exit(main())
