"""What settling costs Redis and the worker, per call and per job.

    python bench/settle_costs.py [--jobs 3000]

On a private redis-server (no persistence): ``Engine.ack`` in batches of 1, 3, 5, 10,
30 and 100 leases (Redis CPU per call and per job, from ``INFO commandstats``), then
20,000 start marks written through an ``AckStream`` as a worker writes them (the writing
thread's CPU per mark; Redis's CPU per mark). docs/performance.md keeps the figures.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from django_delayq.embedded import start  # noqa: E402
from django_delayq.engine import NewJob  # noqa: E402
from django_delayq.engine.engine import Engine  # noqa: E402


def evalsha_usec(client: redis.Redis) -> tuple[int, int]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {"usec": 0, "calls": 0})
    return int(stats["usec"]), int(stats["calls"])


def claimed(engine: Engine, queue: str, n: int, tag: str) -> list:
    engine.enqueue(queue, [NewJob(id="%s-%d" % (tag, i), envelope="{}") for i in range(n)])
    jobs: list = []
    while len(jobs) < n:
        got = engine.claim(queue, 100, 600_000).jobs
        if not got:
            raise RuntimeError("claimed %d of %d jobs" % (len(jobs), n))
        jobs += got
    return jobs


def acks(engine: Engine, client: redis.Redis, n: int) -> None:
    for batch in (1, 3, 5, 10, 30, 100):
        jobs = claimed(engine, "acks", n, "a%d" % batch)
        usec0, calls0 = evalsha_usec(client)
        for i in range(0, n, batch):
            engine.ack("acks", [(j.id, j.token) for j in jobs[i:i + batch]], holder="w")
        usec, calls = (a - b for a, b in zip(evalsha_usec(client), (usec0, calls0)))
        print("ack, %3d leases a call: Redis %6.1f us a call, %5.2f us a job"
              % (batch, usec / calls, usec / n))


def marks(engine: Engine, client: redis.Redis, n: int) -> None:
    jobs = claimed(engine, "marks", n, "m")
    stream = engine.ack_stream("w")
    assert stream is not None
    usec0, calls0 = evalsha_usec(client)
    cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for job in jobs:
        stream.mark(*engine.start_mark(job))
    cpu, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
    stream.close()  # what the kernel held is sent
    deadline = time.monotonic() + 30
    while evalsha_usec(client)[1] - calls0 < n and time.monotonic() < deadline:
        time.sleep(0.05)
    usec, calls = (a - b for a, b in zip(evalsha_usec(client), (usec0, calls0)))
    used = (cpu.ru_utime + cpu.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    print("start mark: writer %.1f us CPU (%.1f us wall) a mark; Redis %.1f us a mark "
          "(%d of %d arrived)" % (used / n * 1e6, wall / n * 1e6, usec / max(calls, 1),
                                  calls, n))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    opts = parser.parse_args()
    proc, url = start(Path(tempfile.mkdtemp(prefix="delayq-costs-")), tcp=True,
                      persistence=False)
    try:
        client = redis.Redis.from_url(url)
        engine = Engine(client, prefix="costs")
        acks(engine, client, opts.jobs)
        marks(engine, client, 20_000)
    finally:
        proc.terminate()
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
