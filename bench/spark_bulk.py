"""Benchmark ``schedule_dataframe`` on local Spark: prints jobs/s into Redis + audit rows.

    python bench/spark_bulk.py [--rows 200000] [--master local[2]] [--keys] [--db postgres]
                               [--prefill 300000]

Self-contained: starts a private redis-server on a free port (never a shared one),
uses a fresh SQLite file (WAL) for the audit table (``--db postgres``: a fresh database
on 127.0.0.1:5432, rows streamed with COPY), and is its own Django settings module
(``spark_bulk``), so executors set Django up exactly like the driver. Exits 1 unless
Redis and the audit table both hold every job. ``--prefill N`` first schedules N
other jobs, untimed, so the timed rows go into a table (and its indexes) already that
big. The load average is printed before and after the timed run: the figure means
little without it on a shared machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# --- Django settings (this module is DJANGO_SETTINGS_MODULE="spark_bulk") -------------
SECRET_KEY = "bench"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_delayq"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
if os.environ.get("DELAYQ_BENCH_PG"):  # --db postgres: a database of its own
    DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql",
                             "NAME": os.environ["DELAYQ_BENCH_PG"], "USER": "postgres",
                             "HOST": "127.0.0.1"}}
else:
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DELAYQ_BENCH_DB", ":memory:"),
        "OPTIONS": {"timeout": 60, "transaction_mode": "IMMEDIATE",
                    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
    }}
DELAYQ = {"REDIS_URL": os.environ.get("DELAYQ_BENCH_REDIS_URL", "redis://127.0.0.1:1/0"),
          "PREFIX": "bench", "ALLOWED_CALLABLES": ["spark_bulk"]}


def noop(*args: Any, **kwargs: Any) -> None:
    """The benchmarked job (never run here)."""


# --- the benchmark ------------------------------------------------------------------------
def _start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    from pathlib import Path

    from django_delayq.embedded import start

    return start(Path(workdir), tcp=True, persistence=False)


def _frame(spark: Any, rows: int, offset: int) -> Any:
    from pyspark.sql import functions as F

    return (spark.range(offset, offset + rows, numPartitions=2)
            .withColumn("order_id", F.col("id").cast("int"))
            .withColumn("delay", (F.col("id") % 3600).cast("double"))
            .withColumn("key", F.concat(F.lit("order-"), F.col("id").cast("string"))))


def _run(spark: Any, rows: int, offset: int, keys: bool) -> float:
    from django_delayq.spark import schedule_dataframe

    df = _frame(spark, rows, offset).cache()
    df.count()  # materialise the input: time only the scheduling
    started = time.perf_counter()
    done = schedule_dataframe(df, "spark_bulk.noop", delay_col="delay", args_cols=["order_id"],
                              key_col="key" if keys else None, settings_module="spark_bulk")
    elapsed = time.perf_counter() - started
    df.unpersist()
    assert done == rows, (done, rows)
    return elapsed


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keys", action="store_true", help="idempotency keys (key_col)")
    parser.add_argument("--prefill", type=int, default=0,
                        help="jobs already in the table before the timed run (untimed)")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite",
                        help="postgres: a fresh database on 127.0.0.1:5432 (user postgres)")
    opts = parser.parse_args(argv)
    if opts.db == "postgres":
        _fresh_pg_database("delayq_spark_bench")
    workdir = tempfile.mkdtemp(prefix="delayq-bench-")
    proc, url = _start_redis(workdir)
    try:
        return _bench(opts, workdir, url)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _fresh_pg_database(name: str) -> None:
    import psycopg

    with psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres",
                         autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS %s" % name)
        conn.execute("CREATE DATABASE %s" % name)
    os.environ["DELAYQ_BENCH_PG"] = name


def _bench(opts: Any, workdir: str, url: str) -> int:
    here = str(Path(__file__).resolve().parent)
    sys.path[:0] = [here, str(Path(here).parent)]
    os.environ.update({"DELAYQ_BENCH_DB": os.path.join(workdir, "bench.sqlite3"),
                       "DELAYQ_BENCH_REDIS_URL": url, "DJANGO_SETTINGS_MODULE": "spark_bulk",
                       "PYSPARK_PYTHON": sys.executable})
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django_delayq.core.connection import get_engine
    from django_delayq.models import Job
    from django_delayq.spark.session import build_session

    spark = build_session(opts.master, app_name="delayq-bench",
                          conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    before = 2000 + opts.prefill
    _run(spark, 2000, 10**9, opts.keys)  # warm up: start and set up the Python workers
    if opts.prefill:
        _run(spark, opts.prefill, 2 * 10**9, opts.keys)
    load = os.getloadavg()
    elapsed = _run(spark, opts.rows, 0, opts.keys)
    stats = get_engine().stats("default")
    in_redis = stats.scheduled + stats.ready - before
    rows = Job.objects.count() - before
    print("schedule_dataframe on %s, %s: %d jobs in %.2f s = %.0f jobs/s (keys=%s, %d rows "
          "in the table before); redis %d, audit rows %d; load average %.2f before, %.2f "
          "after" % (opts.master, opts.db, opts.rows, elapsed, opts.rows / elapsed, opts.keys,
                     before, in_redis, rows, load[0], os.getloadavg()[0]))
    spark.stop()
    return 0 if in_redis == rows == opts.rows else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
