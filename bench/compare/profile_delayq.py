#!/usr/bin/env python
"""Profile django-delayq with py-spy: the worker during an N-job drain, and schedule_many.

    python bench/compare/profile_delayq.py [-n 20000] [--out .bench/profile] [--py-spy PATH]

Writes collapsed stacks (``*.txt``, py-spy ``--format raw``) and prints the top functions
by self and inclusive samples, for the worker (all threads, and only the GIL holder) and
for ``schedule_many`` in this process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
ROOT = BENCH.parent
sys.path[:0] = [str(HERE), str(BENCH), str(ROOT)]


def top(raw: Path, k: int = 25) -> str:
    """Rank frames of a py-spy raw (collapsed) profile by self and inclusive samples."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        total += n
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    rows = ["%s: %d samples" % (raw.name, total), "  self%   incl%  frame"]
    for frame, n in own.most_common(k):
        rows.append("  %5.1f  %6.1f  %s" % (100 * n / total, 100 * incl[frame] / total, frame))
    rows.append("  -- by inclusive --")
    for frame, n in incl.most_common(k):
        rows.append("  %5.1f  %6.1f  %s" % (100 * own[frame] / total, 100 * n / total, frame))
    return "\n".join(rows)


def spy(pyspy: str, pid: int, out: Path, seconds: float, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([pyspy, "record", "--pid", str(pid), "--format", "raw", "-o",
                             str(out), "--duration", str(int(seconds)), "--rate", "250",
                             "--nonblocking", *extra], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=20000)
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "profile")
    p.add_argument("--py-spy", default=shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy")))
    opts = p.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    from foundation import start_redis

    workdir = Path(tempfile.mkdtemp(prefix="delayq-prof-"))
    redis_proc, url = start_redis(workdir)
    os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir), BENCH_DB="sqlite",
                      DJANGO_SETTINGS_MODULE="bench_settings",
                      PYTHONPATH=os.pathsep.join([str(HERE), str(BENCH), str(ROOT)]))
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        from django_delayq.core.api import JobSpec, schedule_many

        bulk = opts.out / "schedule_many.txt"
        me = spy(opts.py_spy, os.getpid(), bulk, 60)
        time.sleep(1.0)
        t0 = time.perf_counter()
        schedule_many("bench_jobs.noop", [JobSpec(args=[i], delay=3600) for i in range(opts.n)])
        print("schedule_many: %.0f jobs/s (under py-spy)" % (opts.n / (time.perf_counter() - t0)))
        me.send_signal(2)
        me.wait()
        from django_delayq.core.connection import get_engine
        from django_delayq.models import Job, JobAttempt

        get_engine().client.flushdb()  # and the rows, or the reconciler re-enqueues them
        JobAttempt.objects.all().delete()
        Job.objects.all().delete()
        schedule_many("bench_jobs.noop", [JobSpec(args=[i]) for i in range(opts.n)])
        from django_delayq.core.conf import get_settings
        from django_delayq.core.reconcile import Reconciler

        s = get_settings()  # steady state: the epoch exists (no data-loss reconcile pass)
        Reconciler(get_engine(), s, tuple(s.queues)).check_epochs()
        worker = subprocess.Popen([sys.executable, "-m", "django", "delayq_worker", "-v", "0",
                                   "--burst", "--concurrency", "4"], cwd=ROOT)
        time.sleep(0.8)
        spies = [spy(opts.py_spy, worker.pid, opts.out / "worker.txt", 120),
                 spy(opts.py_spy, worker.pid, opts.out / "worker-gil.txt", 120, "--gil")]
        t0 = time.perf_counter()
        worker.wait(600)
        print("worker drain wall: %.1fs (under 2 py-spy samplers)" % (time.perf_counter() - t0))
        for s in spies:
            s.wait(30)
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    for name in ("schedule_many.txt", "worker.txt", "worker-gil.txt"):
        if (opts.out / name).exists():
            print(top(opts.out / name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
