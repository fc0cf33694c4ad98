#!/usr/bin/env python
"""The enqueue script's Redis time for one delayed job, next to what its parts cost on
this machine: how far below the script any change to it can go.

    python bench/enqueue_parts.py [-n 3000] [--rounds 3] [--json]

Starts its own redis-server (no persistence). Each figure is the median SLOWLOG duration
(threshold 0, in µs: the time Redis spends running the call, not the round trip) of
``-n`` ``EVALSHA`` calls, each adding one job due in an hour to the same queue (the
queue's pending ZSET grows to ``-n``), the best median of ``--rounds``:

- ``script``: ``enqueue.lua`` as the engine sends it (the short path of ``schedule()``
  with a delay: TIME, the head of pending, one EXISTS over the keys that can hold the
  job, the EXISTS of the cancel holds, ZADD NX, the epoch's SET once);
- ``return_1``: an ``EVALSHA`` of ``return 1`` with the same keys and arguments (what
  calling any script costs);
- ``blocks``: the script's text up to its first statement (its lib.lua blocks defined),
  then ``return 1``;
- ``bare_commands``: the same five commands in a script of one line each, no checks;
- ``time`` and ``zadd``: ``return_1``'s script with only that one command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from foundation import start_redis  # noqa: E402

from django_delayq.engine import scripts  # noqa: E402

BARE = ("redis.call('TIME') redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES') "
        "redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[3]) redis.call('EXISTS', KEYS[4]) "
        "redis.call('ZADD', KEYS[1], 'NX', ARGV[4], ARGV[3]) return 1")


def median_us(client: Any, source: str, keys: list[str], n: int) -> float:
    sha = client.script_load(source)
    client.flushdb()
    client.config_set("slowlog-max-len", n + 100)
    client.config_set("slowlog-log-slower-than", 0)
    client.slowlog_reset()
    due = int(time.time() * 1000) + 3_600_000
    for i in range(n):
        client.evalsha(sha, len(keys), *keys, "0", "ch", "job%d" % i, str(due + i), "0", "",
                       "0", "")
    client.config_set("slowlog-log-slower-than", 10_000)
    durations = [e["duration"] for e in client.slowlog_get(n + 100)
                 if e["command"].startswith(b"EVALSHA")]
    return float(statistics.median(durations))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    script = scripts.load("enqueue")
    keys = ["{bench}:" + k.name for k in script.keys]
    first = script.source.index("local now = now_ms(ARGV[1])")
    sources = {"script": script.source, "return_1": "return 1",
               "blocks": script.source[:first] + "return 1", "bare_commands": BARE,
               "time": "redis.call('TIME') return 1",
               "zadd": "redis.call('ZADD', KEYS[1], 'NX', ARGV[4], ARGV[3]) return 1"}
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_redis(Path(tmp))
        try:
            client = redis.Redis.from_url(url)
            best = {name: min(median_us(client, src, keys, args.n) for _ in range(args.rounds))
                    for name, src in sources.items()}
            server = client.info("server")["redis_version"]
        finally:
            proc.terminate()
            proc.wait()
    out = {"redis": server, "load": os.getloadavg()[0], "median_us": best}
    if args.json:
        print(json.dumps(out))
    else:
        print("redis %s, load %.2f; median µs of one call (best of %d rounds of %d):"
              % (server, out["load"], args.rounds, args.n))
        for name, us in best.items():
            print("  %-14s %6.1f" % (name, us))
    return 0


if __name__ == "__main__":
    sys.exit(main())
