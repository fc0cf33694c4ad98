#!/usr/bin/env python
"""Slow jobs after no-op ones: do they spread over the workers' threads?

    python bench/prefetch_spread.py [--slow 24] [--seconds 0.5] [--right-behind]
                                    [--db sqlite|postgres]

One ``delayq_worker --processes 2 --concurrency 4`` (its own Redis and database, as
bench/foundation.py): both processes run no-op jobs until each has learnt their pace,
400 more no-op jobs are drained (or, ``--right-behind``, the slow ones are scheduled
right behind them), then ``--slow`` jobs sleeping ``--seconds`` each. Prints the slow
jobs' first start to last end and how many each process ran (one process alone needs
slow / 4 * seconds; both, half that).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections import Counter

from foundation import open_bench, reset, worker


def wait(condition: object, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.05)


def run(slow: int, seconds: float, right_behind: bool) -> dict[str, object]:
    from django.db import transaction
    from django.db.models import Max, Min

    from django_delayq import JobSpec, schedule, schedule_many
    from django_delayq.models import Job

    reset()
    proc = worker("--processes", "2", "--concurrency", "4")
    try:
        def both_ran() -> bool:
            if Job.objects.filter(status="succeeded").values("worker_id").distinct().count() == 2:
                return True
            schedule_many("bench_jobs.noop", [JobSpec(args=[i]) for i in range(8)])
            return False
        wait(both_ran)
        with transaction.atomic():
            for i in range(400):
                schedule("bench_jobs.noop", i)
        if not right_behind:
            wait(lambda: not Job.objects.exclude(status="succeeded").exists())
        ids = schedule_many("bench_jobs.sleep", [JobSpec(args=[seconds]) for _ in range(slow)])
        rows = Job.objects.filter(id__in=ids)
        wait(lambda: rows.filter(status="succeeded").count() == slow)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    span = rows.aggregate(first=Min("started_at"), last=Max("finished_at"))
    return {"slow_jobs": slow, "seconds_each": seconds, "right_behind": right_behind,
            "first_start_to_last_end_s": round((span["last"] - span["first"]).total_seconds(), 2),
            "runs_per_process": sorted(Counter(rows.values_list("worker_id", flat=True)).values(),
                                       reverse=True)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=24)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--right-behind", action="store_true")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    opts = parser.parse_args()
    redis_proc = open_bench(opts.db)
    try:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        print(json.dumps(run(opts.slow, opts.seconds, opts.right_behind)))
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
