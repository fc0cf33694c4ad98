#!/usr/bin/env python
"""schedule()'s steps one by one: CPU µs per call of each, in this process.

    python bench/schedule_path_steps.py [-n 3000] [--rounds 7] [--db sqlite|postgres] [--json]

Each step runs ``-n`` times in a loop of its own, the steps taking turns round after round
(so a busy machine's swings fall on all of them alike); printed: the median and the best of
the rounds, CPU µs per call of this process (``time.process_time``: the database driver,
SQLite's own work and the socket calls included; a wait for a reply is not CPU, the sleep
and wake-up around it are; each loop ends by writing the events it buffered). The steps,
in the order ``schedule()`` runs them:

- ``options``: ``JobSpec`` made and checked (``JobOptions.check``: the allow-list, queue,
  retries, due time...);
- ``build``: the row's values and the entry for Redis (``Checked.new``: the arguments'
  JSON and size, their binding to the function, the id);
- ``values``: the INSERT's parameters from those values (``row_insert.values_params``);
- ``insert``: the prepared INSERT through ``connection.cursor()`` with values prepared
  once (the floor's INSERT), in one transaction; ``insert_auto``: the same in autocommit
  (each INSERT commits);
- ``signal``: ``job_scheduled`` with its receivers (the ``scheduled`` event's formatting
  and its ``on_commit``), in one transaction, committed;
- ``commit_path``: ``commit_batch.enqueue_after_commit`` of one job in one transaction
  (its ``on_commit`` callback; the send, one script call per ``MAX_ENQUEUE`` jobs, included);
- ``send_one``: ``Engine.enqueue`` of one job (as autocommit sends it);
- ``round_trip``: ``EVALSHA`` of ``return 1`` (the floor's round trip), and
  ``round_trip_args``: the same with the enqueue's keys and arguments;
- ``insert_auto_send_one``: ``insert_auto`` then ``send_one``, taking turns in one loop
  (what autocommit's ``schedule()`` does, without its own steps);
- ``schedule_tx``/``schedule_auto``: ``schedule()`` itself, in one transaction and in
  autocommit.

Starts its own redis-server; SQLite in a temporary directory (bench_settings) or
PostgreSQL (``delayq_bench_schedule_steps``, created fresh). Events on, as by default
(``BENCH_EVENTS=0``: off).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from schedule_path import bare_insert, bench_session, run_calls  # noqa: E402


def _steps() -> dict[str, tuple[Callable[[int], object], bool]]:
    """Name -> (one call, whether the loop runs in one transaction)."""
    from django.db import connection
    from django.utils import timezone

    from django_delayq import schedule, signals
    from django_delayq.core import commit_batch, ids, row_insert
    from django_delayq.core.conf import get_settings
    from django_delayq.core.connection import get_engine
    from django_delayq.core.options import JobSpec
    from django_delayq.engine import scripts
    from django_delayq.engine.outcomes import NewJob
    from django_delayq.models import Job

    path, limit = "bench_jobs.noop", get_settings().max_payload_bytes
    spec = JobSpec(args=(1,), kwargs={}, delay=3600)
    checked = spec.check(path, clash=True)
    values, _ = checked.new(spec.args, spec.kwargs, limit)  # as schedule() gives it
    now = timezone.now()
    row = Job(id=ids.new_id(), queue="default", callable_path=path, args=[1], kwargs={},
              run_at=now, scheduled_for=now, max_attempts=3)
    sql, params = bare_insert(row, connection)
    engine = get_engine()
    client = engine.client
    sha = client.script_load("return 1")
    keys = scripts.keys_of("enqueue", engine.keys("default"))

    def insert(i: int) -> None:
        params[0] = ids.new_id()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)

    def new_job() -> NewJob:
        return NewJob(id=ids.new_id(), at_ms=None, delay_ms=3_600_000)

    return {
        "options": (lambda i: JobSpec(args=(i,), kwargs={}, delay=3600).check(
            path, clash=True), False),
        "build": (lambda i: checked.new((i,), {}, limit), False),
        "values": (lambda i: row_insert.values_params(values, "default"), False),
        "insert": (insert, True),
        "insert_auto": (insert, False),
        "signal": (lambda i: signals.send(signals.job_scheduled, job_id=values["id"],
                                          queue="default", callable_path=path,
                                          run_at=values["run_at"]), True),
        "commit_path": (lambda i: commit_batch.enqueue_after_commit(
            "default", "default", [new_job()]), True),
        "send_one": (lambda i: engine.enqueue("default", [new_job()]), False),
        "round_trip": (lambda i: client.evalsha(sha, 0), False),
        "round_trip_args": (lambda i: client.evalsha(
            sha, len(keys), *keys, 0, "wake", ids.new_id(), -1, 3_600_000, "", 0, ""), False),
        "insert_auto_send_one": (lambda i: (insert(i), engine.enqueue(
            "default", [new_job()])), False),
        "schedule_tx": (lambda i: schedule(path, i, delay=3600), True),
        "schedule_auto": (lambda i: schedule(path, i, delay=3600), False),
    }


def _loop(n: int, step: Callable[[int], object], one_tx: bool) -> float:
    c0 = time.process_time()
    run_calls(n, step, one_tx)  # the events of this loop written in it, not in the next's
    return (time.process_time() - c0) / n * 1e6


def measure(n: int, rounds: int) -> dict[str, Any]:
    steps = _steps()
    for step, one_tx in steps.values():  # warm-up: scripts loaded, connections open
        _loop(50, step, one_tx)
    seen: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, (step, one_tx) in steps.items():
            seen[name].append(_loop(n, step, one_tx))
    return {name: {"median_us": round(statistics.median(v), 1), "best_us": round(min(v), 1)}
            for name, v in seen.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--json", action="store_true")
    opts = p.parse_args()
    with bench_session("delayq-steps-", opts.db, "delayq_bench_schedule_steps"):
        out: dict[str, Any] = {"db": opts.db, "n": opts.n, "rounds": opts.rounds,
                               "load_before": os.getloadavg()[0]}
        out["steps_cpu_us_per_call"] = measure(opts.n, opts.rounds)
        out["load_after"] = os.getloadavg()[0]
    if opts.json:
        print(json.dumps(out))
    else:
        for name, value in out.items():
            if isinstance(value, dict):
                for step, figures in value.items():
                    print("%-18s median %7.1f  best %7.1f" % (
                        step, figures["median_us"], figures["best_us"]))
            else:
                print("%-18s %s" % (name, value))
    return 0


if __name__ == "__main__":
    sys.exit(main())
