#!/usr/bin/env python
"""schedule() path, this tree against an older one in the same process: the older tree's
``core`` modules of the path (``validation``, ``ids``, ``registry``, ``options``,
``row_insert``, ``commit_batch``, ``api``) are loaded beside this tree's, their references
to one another pointed at the older copies, and the two trees' ``schedule()`` take turns,
round after round, so that a busy machine's swings fall on both alike.

    python bench/schedule_path_ab.py --before DIR [-n 500] [--rounds 12] [--db sqlite|postgres]

``DIR`` is a checkout of the older tree (``git worktree add DIR <commit> --detach``). The
older tree's engine (``engine/engine.py`` and ``engine/sharded.py``: the older copies'
commit path sends through an older ``ShardedEngine`` on this tree's client) and its
``job_scheduled`` receiver of the event stream (``core/events.py``'s ``_on_scheduled``,
swapped in for the older tree's rounds, buffering into this tree's stream) are the older
tree's too; the other modules (signals, the event stream, the scripts) are this tree's
for both. Each round schedules ``-n`` jobs in autocommit and ``-n`` in one transaction
with each tree; printed: the median and the best of the rounds, jobs/s and CPU µs per
job of this process (each loop ends by writing its events). Starts its own redis-server;
SQLite in a temporary directory or PostgreSQL (``delayq_bench_schedule_ab``, created
fresh; Django's server-side binding with ``BENCH_PG_SERVER_BINDING=1``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from foundation import start_redis  # noqa: E402

MODULES = ("validation", "ids", "registry", "options", "row_insert", "commit_batch", "api")


def _load(tree: Path, name: str) -> ModuleType:
    return _load_file(tree / "django_delayq" / "core" / ("%s.py" % name), "before_%s" % name)


def _load_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _older_schedule(tree: Path) -> Any:
    """The older tree's ``api.schedule``, its modules calling one another's older copies."""
    current = {name: importlib.import_module("django_delayq.core." + name) for name in MODULES}
    package = importlib.import_module("django_delayq.core")
    older: dict[str, ModuleType] = {}
    try:  # each older module sees the older copies loaded before it (a module-level use)
        for name in MODULES:
            older[name] = _load(tree, name)
            setattr(package, name, older[name])
    finally:
        for name, mine in current.items():
            setattr(package, name, mine)
    for module in older.values():
        for attr, value in list(vars(module).items()):
            for name, mine in current.items():
                if value is mine:  # ``from django_delayq.core import options``
                    setattr(module, attr, older[name])
                elif (getattr(value, "__module__", None) == mine.__name__
                      and getattr(mine, attr, None) is value and hasattr(older[name], attr)):
                    setattr(module, attr, getattr(older[name], attr))  # ``import JobSpec``
    return older["api"].schedule


def _older_engine_and_receiver(tree: Path) -> Any:
    """The older tree's engine made to send the older commit path's jobs; returns its
    receiver of ``job_scheduled`` (buffering into this tree's stream; observing only once
    swapped in)."""
    from django_delayq import signals
    from django_delayq.core import events
    from django_delayq.core.conf import get_settings
    from django_delayq.core.connection import get_engine

    engine_module = _load_file(tree / "django_delayq/engine/engine.py", "before_engine")
    mine = sys.modules["django_delayq.engine.engine"]
    sys.modules["django_delayq.engine.engine"] = engine_module  # its ShardedEngine's base
    try:
        sharded = _load_file(tree / "django_delayq/engine/sharded.py", "before_sharded")
    finally:
        sys.modules["django_delayq.engine.engine"] = mine
    s = get_settings()
    engine = sharded.ShardedEngine(get_engine().client, prefix=s.prefix, shards=s.queue_shards)
    sys.modules["before_commit_batch"].get_engine = lambda: engine
    observers = dict(signals._observers)
    older_events = _load_file(tree / "django_delayq/core/events.py", "before_events")
    signals._observers.clear()  # its import observed the signals: undone
    signals._observers.update(observers)
    older_events._add = events._add
    return older_events._on_scheduled


def _receiver(older: Any) -> Any:
    """``use(label)``: the ``job_scheduled`` receiver of that tree observing."""
    from django_delayq import signals
    from django_delayq.core import events

    def use(label: str) -> None:
        gone, kept = (events._on_scheduled, older) if label == "before" else (
            older, events._on_scheduled)
        signals._observers[signals.job_scheduled] = tuple(
            kept if fn is gone else fn for fn in signals._observers[signals.job_scheduled])

    return use


def _round(n: int, schedule: Any) -> tuple[float, float, float, float]:
    """jobs/s and CPU µs/job: ``n`` calls in autocommit, then ``n`` in one transaction."""
    from schedule_path import run_calls

    def step(i: int) -> None:
        schedule("bench_jobs.noop", i, delay=3600)

    t0, c0 = time.perf_counter(), time.process_time()
    run_calls(n, step, False)
    auto, auto_cpu = n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6
    t0, c0 = time.perf_counter(), time.process_time()
    run_calls(n, step, True)
    return (auto, auto_cpu, n / (time.perf_counter() - t0),
            (time.process_time() - c0) / n * 1e6)


def compare(before_tree: Path, n: int, rounds: int) -> dict[str, Any]:
    from django_delayq.core import api

    trees = {"after": api.schedule, "before": _older_schedule(before_tree)}
    use = _receiver(_older_engine_and_receiver(before_tree))
    names = ("autocommit_jobs_per_s", "autocommit_cpu_us_per_job",
             "one_transaction_jobs_per_s", "one_transaction_cpu_us_per_job")
    seen: dict[str, list[tuple[float, ...]]] = {label: [] for label in trees}
    for r in range(rounds + 1):
        for label in (("before", "after") if r % 2 else ("after", "before")):
            use(label)
            figures = _round(n, trees[label])
            if r:  # round 0 warms both up
                seen[label].append(figures)
    use("after")
    out: dict[str, Any] = {}
    for i, name in enumerate(names):
        row: dict[str, Any] = {}
        for label, runs in seen.items():
            values = [run[i] for run in runs]
            row[label] = {"median": round(statistics.median(values)),
                          "best": round(min(values) if "cpu" in name else max(values))}
        row["after/before (medians)"] = round(row["after"]["median"] / row["before"]["median"], 3)
        out[name] = row
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True)
    p.add_argument("-n", type=int, default=500)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    opts = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="delayq-schedule-ab-"))
    redis_proc, url = start_redis(workdir)
    os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir), BENCH_DB=opts.db,
                      BENCH_PGDATABASE="delayq_bench_schedule_ab")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")
    try:
        from schedule_path import setup

        setup(opts.db)
        load = os.getloadavg()[0]
        out = {"db": opts.db, "n": opts.n, "rounds": opts.rounds, "load_before": load,
               **compare(opts.before, opts.n, opts.rounds),
               "load_after": os.getloadavg()[0]}
        from django_delayq.core import events

        events.flush()  # the scheduled events, before their Redis goes
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    for key, value in out.items():
        print("%-32s %s" % (key, json.dumps(value)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
