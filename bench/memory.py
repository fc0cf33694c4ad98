#!/usr/bin/env python
"""Redis memory per pending job: today's layout, measured through ``Engine.enqueue``, and
candidate layouts built with plain commands (same data, different shapes).

    python bench/memory.py [-n 100000] [--redis redis://...] [--json]

Each figure is the ``INFO memory`` ``used_memory`` delta / n for n jobs due in 1-2 h with
small arguments (one 13-digit integer), after FLUSHDB. Candidates:

- ``engine``      what django-delayq stores (``schedule``/``schedule_many``): the id in the
                  pending ZSET, the payload in the audit row (via ``Engine.enqueue``)
- ``envelope``    the bare engine given envelopes (and django-delayq before 0.2): pending
                  ZSET (26-char id) + jobs HASH id -> envelope (via Lua)
- ``short-id``    the envelope layout with 16-character ids
- ``lean-env``    short ids and an envelope without defaults (no ``{}`` kwargs, no
                  max_attempts when it equals the default)
- ``buckets``     short ids; envelopes in 128-entry HASH buckets (listpack encoding;
                  the bucket key = id prefix, passed in KEYS by the client)
- ``in-member``   no HASH: the ZSET member is ``id|envelope`` (cancel/reschedule then need
                  the member, e.g. rebuilt from the audit row)
- ``zset-only``   ids only in Redis; the payload read from the audit row at claim time
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from django_delayq.core.ids import new_id  # noqa: E402
from django_delayq.engine import Engine, NewJob  # noqa: E402
from django_delayq.engine.envelope import Envelope  # noqa: E402

PATH = "bench_jobs.noop"
BUCKET = 128


def arg(i: int) -> int:
    return 1_795_000_000_000 + i


def env_today(i: int) -> str:
    return Envelope(path=PATH, args=[arg(i)], max_attempts=3).encode()


def env_lean(i: int) -> str:
    return Envelope(path=PATH, args=[arg(i)]).encode()


def short_id() -> str:
    return new_id()[:16]


def via_engine(with_envelope: bool) -> Callable[[Any, int, int], None]:
    def build(client: Any, n: int, due: int) -> None:
        engine = Engine(client, prefix="mem")
        for start in range(0, n, 1000):
            engine.enqueue("default", [
                NewJob(id=new_id(), envelope=env_today(i) if with_envelope else None,
                       at_ms=due + random.randrange(3_600_000))
                for i in range(start, min(n, start + 1000))])
    return build


def plain(make_id: Callable[[], str], make_env: Callable[[int], str] | None,
          buckets: bool = False, in_member: bool = False) -> Callable[[Any, int, int], None]:
    def build(client: Any, n: int, due: int) -> None:
        for start in range(0, n, 1000):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(n, start + 1000)):
                jid = make_id()
                if in_member and make_env is not None:
                    pipe.zadd("{mem:default}:pending",
                              {jid + "|" + make_env(i): due + random.randrange(3_600_000)})
                    continue
                pipe.zadd("{mem:default}:pending", {jid: due + random.randrange(3_600_000)})
                if make_env is None:
                    continue
                key = "{mem:default}:jobs"
                if buckets:  # ~n/128 buckets: the id's sequence number picks one
                    key += ":%x" % (i // BUCKET)
                pipe.hset(key, jid, make_env(i))
            pipe.execute()
    return build


LAYOUTS: dict[str, Callable[[Any, int, int], None]] = {
    "engine": via_engine(False),
    "envelope": via_engine(True),
    "short-id": plain(short_id, env_today),
    "lean-env": plain(short_id, env_lean),
    "buckets": plain(short_id, env_lean, buckets=True),
    "in-member": plain(new_id, env_lean, in_member=True),
    "zset-only": plain(new_id, None),
}


def measure(client: Any, name: str, n: int) -> float:
    client.flushdb()
    time.sleep(0.2)
    before = int(client.info("memory")["used_memory"])
    LAYOUTS[name](client, n, int(time.time() * 1000) + 3_600_000)
    after = int(client.info("memory")["used_memory"])
    return round((after - before) / n, 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=100_000)
    p.add_argument("--redis")
    p.add_argument("--json", action="store_true")
    opts = p.parse_args()
    import redis

    proc, url = None, opts.redis
    if url is None:
        from foundation import start_redis

        proc, url = start_redis(Path(tempfile.mkdtemp(prefix="delayq-mem-")))
    try:
        client = redis.Redis.from_url(url)
        out: dict[str, Any] = {"n": opts.n, "redis_version": client.info()["redis_version"],
                               "envelope_today": env_today(0), "envelope_lean": env_lean(0),
                               "bytes_per_job": {k: measure(client, k, opts.n) for k in LAYOUTS}}
        client.flushdb()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
    if opts.json:
        print(json.dumps(out))
    else:
        print("n=%d, Redis %s; envelope today %s, lean %s" % (
            out["n"], out["redis_version"], out["envelope_today"], out["envelope_lean"]))
        for name, value in out["bytes_per_job"].items():
            print("  %-10s %6.1f bytes/job" % (name, value))
    return 0


if __name__ == "__main__":
    sys.exit(main())
