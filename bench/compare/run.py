#!/usr/bin/env python
"""Side-by-side comparison: django-delayq vs RQ, Dramatiq, Celery, Huey and BullMQ.

    python bench/compare/run.py [--quick] [--only delayq,rq,...] [--skip-latency]

(``make bench-compare``.) Installs the peers in their own virtualenv (.venv-peers) and
BullMQ with npm (bench/compare/node), starts ONE private redis-server (free port, no
persistence), and runs the same no-op job through every system, one phase per process,
Redis flushed in between. django-delayq runs in this interpreter's environment with its
real ``delayq_worker`` and audit rows ON (SQLite). Prints one table, writes the results
JSON under .bench/compare/ and a PNG chart (default docs/img/performance.png; --quick
writes .bench/compare/performance-quick.png unless --chart is given).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peers_env  # noqa: E402
import report  # noqa: E402

ROOT = peers_env.ROOT
OUT_DIR = ROOT / ".bench" / "compare"
SYSTEMS = ("delayq", "rq", "dramatiq", "celery", "huey", "bullmq")
PHASES = ("describe", "enqueue", "drain", "lateness", "memory", "kill")
logger = logging.getLogger("bench.compare")

FULL = {"enqueue": 5000, "drain": 20000, "lateness": 2000, "spread": 10.0, "memory": 100000,
        "kill": 5000,
        "latency_sizes": "10000,1000000", "backlog": 1_000_000}
QUICK = {"enqueue": 1000, "drain": 5000, "lateness": 500, "spread": 5.0, "memory": 20000,
         "kill": 2000,
         "latency_sizes": "10000,100000", "backlog": 100_000}


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    from django_delayq.embedded import start

    return start(workdir, tcp=True, persistence=False)


def run_bounded(argv: list[str], timeout: float, log: Path) -> dict[str, Any]:
    """Run one phase process in its own session; kill its whole group on timeout."""
    with open(log, "ab") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=HERE,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # the phase stops its worker on SIGTERM
            try:
                proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
            return {"error": "timed out after %.0fs" % timeout}
    lines = out.decode(errors="replace").splitlines()
    for line in lines:
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    if proc.returncode == 0 and lines and lines[-1].startswith("{"):
        return json.loads(lines[-1])  # script_latency.py --json
    return {"error": "exit %d, no result (see %s)" % (proc.returncode, log)}


def phase_timeout(phase: str, sizes: dict[str, Any]) -> float:
    return {"describe": 120, "enqueue": 120 + sizes["enqueue"] / 20,
            "drain": 120 + sizes["drain"] / 50, "lateness": 90 + sizes["spread"],
            "memory": 120 + sizes["memory"] / 100, "kill": 180 + sizes["kill"] / 50}[phase]


def run_system(name: str, python: Path, url: str, workdir: Path, sizes: dict[str, Any],
               concurrency: int) -> dict[str, Any]:
    import redis

    client = redis.Redis.from_url(url)
    result: dict[str, Any] = {}
    n_of = {"describe": 1, "enqueue": sizes["enqueue"], "drain": sizes["drain"],
            "lateness": sizes["lateness"], "memory": sizes["memory"], "kill": sizes["kill"]}
    for phase in PHASES:
        client.flushall()
        client.config_resetstat()
        client.slowlog_reset()
        logger.info("%s: %s", name, phase)
        argv = [str(python), str(HERE / ("peer_%s.py" % name)), phase, "--redis", url,
                "--workdir", str(workdir / name), "-n", str(n_of[phase]),
                "--spread", str(sizes["spread"]), "--concurrency", str(concurrency)]
        got = run_bounded(argv, phase_timeout(phase, sizes), workdir / ("%s.log" % name))
        if "error" in got:
            logger.warning("%s %s: %s", name, phase, got["error"])
            result.setdefault("errors", {})[phase] = got["error"]
        else:
            result.update(got)
        if phase == "drain" and got.get("drain_jobs"):
            result.update(redis_cost(client, int(got["drain_jobs"])))
    client.flushall()
    return result


def redis_cost(client: Any, jobs: int) -> dict[str, Any]:
    """Redis's own time per job over the drain phase (enqueue + run), from INFO
    commandstats; the slowest command from SLOWLOG (calls over 1 ms are logged)."""
    stats = client.info("commandstats")
    usec = sum(int(v["usec"]) for v in stats.values())
    scripts = sum(int(v["usec"]) for k, v in stats.items()
                  if k.startswith(("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall")))
    slow = client.slowlog_get(1024)
    return {"redis_us_per_job": round(usec / jobs, 1),
            "redis_script_us_per_job": round(scripts / jobs, 1),
            "redis_commands_per_job": round(sum(int(v["calls"]) for v in stats.values())
                                            / jobs, 2),
            "redis_slowest_ms": round(max((int(e["duration"]) for e in slow), default=0)
                                      / 1000, 2)}


def script_latency(url: str, sizes: dict[str, Any], workdir: Path) -> dict[str, Any]:
    argv = [sys.executable, str(ROOT / "bench" / "script_latency.py"), "--redis", url,
            "--sizes", sizes["latency_sizes"], "--drain", str(sizes["backlog"]), "--json"]
    logger.info("delayq: script latency (%s pending) and %d-job backlog drain",
                sizes["latency_sizes"], sizes["backlog"])
    return run_bounded(argv, 900, workdir / "script_latency.log")


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except OSError:
        mem_kb = 0
    return {"nproc": os.cpu_count(), "cpu": model, "memory_gb": round(mem_kb / 2**20, 1),
            "python": platform.python_version(), "load_avg": os.getloadavg()}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes (about 3 minutes)")
    p.add_argument("--only", default=",".join(SYSTEMS), help="comma-separated systems")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--skip-latency", action="store_true", help="no script-latency run")
    p.add_argument("--chart", type=Path, help="PNG to write")
    return p.parse_args()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    opts = parse()
    sizes = QUICK if opts.quick else FULL
    chosen = [s.strip() for s in opts.only.split(",") if s.strip()]
    unknown = set(chosen) - set(SYSTEMS)
    if unknown:
        sys.exit("unknown system(s) %s; choose from %s" % (sorted(unknown), ",".join(SYSTEMS)))
    peers_py = peers_env.peers_python() if set(chosen) - {"delayq"} else None
    if "bullmq" in chosen and (why := peers_env.bullmq_ready()):
        logger.warning("BullMQ left out: %s", why)
        chosen.remove("bullmq")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="delayq-compare-"))
    redis_proc, url = start_redis(workdir)
    results: dict[str, Any] = {"sizes": sizes, "concurrency": opts.concurrency,
                               "machine": machine(), "systems": {}}
    try:
        import redis

        admin = redis.Redis.from_url(url)
        results["redis_version"] = admin.info("server")["redis_version"]
        admin.config_set("slowlog-log-slower-than", 1000)
        admin.config_set("slowlog-max-len", 1024)
        for name in chosen:
            python = Path(sys.executable) if name == "delayq" else peers_py
            assert python is not None
            results["systems"][name] = run_system(name, python, url, workdir, sizes,
                                                  opts.concurrency)
        if "delayq" in chosen and not opts.skip_latency:
            results["script_latency"] = script_latency(url, sizes, workdir)
    finally:
        redis_proc.terminate()
        redis_proc.wait()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results["title"] = "django-delayq vs peers, %s%s" % (stamp, " (--quick)" if opts.quick else "")
    out_json = OUT_DIR / ("results-%s.json" % stamp)
    out_json.write_text(json.dumps(results, indent=2))
    print(report.table(results))
    chart = opts.chart or (OUT_DIR / "performance-quick.png" if opts.quick
                           else ROOT / "docs" / "img" / "performance.png")
    if peers_py is not None:
        chart.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(peers_py), str(HERE / "chart.py"), str(out_json), str(chart)],
                       check=False, timeout=120)
        print("chart: %s" % chart)
    print("results: %s  (logs in %s)" % (out_json, workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
