"""The Spark pipeline on a real standalone cluster: ``make spark-cluster-demo``.

    python scripts/spark_cluster_demo.py [--rows 20000]

Starts, from the installed pyspark (``spark-class`` in its ``bin/``), a standalone
Master and one Worker listening on 127.0.0.1 only, a private redis-server and a fresh
SQLite file; then, with ``spark://127.0.0.1:<port>`` as the master:

1. ``schedule_dataframe`` schedules ``--rows`` jobs on the cluster's executors;
2. a tenth of them are given an outcome (succeeded, 5 ms late), the rest stay scheduled;
3. ``export_jobs`` writes the audit rows to Parquet and ``run_report`` computes the
   report on the cluster;

and checks the counts (Redis, audit table, export, report) and that the executors ran
the interpreter named by ``spark.pyspark.python`` (given in ``conf``, with
``PYSPARK_PYTHON`` unset). Everything is stopped at the end, also after a failure.
Exit 0 when every check holds. This module is also the Django settings module of the
run (``spark_cluster_demo``), so executors set Django up exactly like the driver.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

# --- Django settings (this module is DJANGO_SETTINGS_MODULE="spark_cluster_demo") ------
SECRET_KEY = "demo"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_delayq"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": os.environ.get("DELAYQ_DEMO_DB", ":memory:"),
    "OPTIONS": {"timeout": 60, "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
}}
DELAYQ = {"REDIS_URL": os.environ.get("DELAYQ_DEMO_REDIS_URL", "redis://127.0.0.1:1/0"),
          "PREFIX": "demo", "ALLOWED_CALLABLES": ["spark_cluster_demo"]}
DEMO_ENV = ("DELAYQ_DEMO_DB", "DELAYQ_DEMO_REDIS_URL")


def remind(order_id: int) -> None:
    """The scheduled job (never run here)."""


# --- the cluster ------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_class() -> tuple[str, str]:
    import pyspark

    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    return home, os.path.join(home, "bin", "spark-class")


def _wait(what: str, check: Any, timeout: float, procs: list[subprocess.Popen[bytes]]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError("%s: a Spark daemon exited (%s)" % (what, proc.returncode))
        try:
            if value := check():
                return value
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("%s: not ready after %d s" % (what, timeout))


def _ui_json(port: int) -> dict[str, Any]:
    with urllib.request.urlopen("http://127.0.0.1:%d/json/" % port, timeout=5) as resp:
        return dict(json.loads(resp.read()))


def start_cluster(workdir: Path) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A Master and one Worker (2 cores, 1 GB) on 127.0.0.1; returns (master URL, procs)."""
    home, spark_class = _spark_class()
    env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(workdir / "logs"), "SPARK_WORKER_DIR": str(workdir / "work")}
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    url = "spark://127.0.0.1:%d" % port
    procs: list[subprocess.Popen[bytes]] = []
    log = (workdir / "spark-daemons.log").open("ab")
    procs.append(subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui)], env=env, stdout=log, stderr=log))
    try:
        _wait("master", lambda: _ui_json(ui).get("status") == "ALIVE", 90, procs)
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
             "--cores", "2", "--memory", "1g", "--webui-port", str(worker_ui), url],
            env=env, stdout=log, stderr=log))
        _wait("worker", lambda: _ui_json(ui).get("aliveworkers", 0) >= 1, 90, procs)
    except BaseException:
        stop(procs)
        raise
    print("standalone cluster at %s (web UI http://127.0.0.1:%d)" % (url, ui))
    return url, procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(procs):  # the worker, then the master; only what we started
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# --- the demo -----------------------------------------------------------------------------
def _setup_django(workdir: Path, redis_url: str) -> None:
    here = str(Path(__file__).resolve().parent)
    sys.path[:0] = [here, str(Path(here).parent)]
    os.environ.update({"DELAYQ_DEMO_DB": str(workdir / "demo.sqlite3"),
                       "DELAYQ_DEMO_REDIS_URL": redis_url,
                       "DJANGO_SETTINGS_MODULE": "spark_cluster_demo"})
    os.environ.pop("PYSPARK_PYTHON", None)  # spark.pyspark.python alone must decide
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver listens on loopback only too
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _session(master: str) -> Any:
    from django_delayq.spark.session import build_session

    conf = {"spark.pyspark.python": sys.executable, "spark.ui.enabled": "false",
            "spark.executor.memory": "512m", "spark.cores.max": "2",
            "spark.sql.shuffle.partitions": "4", "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1"}
    conf.update({"spark.executorEnv.%s" % k: os.environ[k] for k in DEMO_ENV})
    spark = build_session(master, app_name="delayq-cluster-demo", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _executor_pythons(spark: Any) -> set[str]:
    def where(_: Any) -> Any:
        import sys

        yield sys.executable

    return set(spark.sparkContext.parallelize(range(4), 4).mapPartitions(where).collect())


def _give_outcomes(every: int) -> int:
    """Every ``every``-th job succeeded, started 5 ms after its due time, ran 20 ms."""
    from django.utils import timezone

    from django_delayq.models import Job

    done = []
    for job in Job.objects.order_by("id")[::every]:
        job.status, job.attempts = "succeeded", 1
        job.started_at = job.run_at + timedelta(milliseconds=5)
        job.finished_at = job.started_at + timedelta(milliseconds=20)
        job.updated_at = timezone.now() - timedelta(seconds=5)
        done.append(job)
    Job.objects.bulk_update(done, ["status", "attempts", "started_at", "finished_at",
                                   "updated_at"])
    return len(done)


def run(master: str, workdir: Path, rows: int) -> list[str]:
    """The demo on ``master``; returns the failed checks (empty: all good)."""
    from pyspark.sql import functions as F

    from django_delayq.core.connection import get_engine
    from django_delayq.models import Job
    from django_delayq.spark import export_jobs, run_report, schedule_dataframe

    spark = _session(master)
    try:
        pythons = _executor_pythons(spark)
        df = (spark.range(rows, numPartitions=4).withColumn("order_id", F.col("id").cast("int"))
              .withColumn("delay", (F.col("id") % 600 + 60).cast("double")))
        handled = schedule_dataframe(df, "spark_cluster_demo.remind", delay_col="delay",
                                     args_cols=["order_id"], settings_module="spark_cluster_demo")
        stats = get_engine().stats("default")
        succeeded = _give_outcomes(10)
        exported = export_jobs(workdir / "export", progress=False, settle=timedelta(0))
        files = run_report(spark, workdir / "report", input=workdir / "export")
    finally:
        spark.stop()
    overall = files.report["groups"][0]
    checks = {
        "executors ran spark.pyspark.python %s (got %s)" % (sys.executable, pythons):
            pythons == {sys.executable},
        "schedule_dataframe handled %d rows (got %d)" % (rows, handled): handled == rows,
        "Redis holds %d jobs (got %d)" % (rows, stats.scheduled + stats.ready):
            stats.scheduled + stats.ready == rows,
        "the audit table holds %d rows" % rows: Job.objects.count() == rows,
        "the export wrote %d rows (got %d)" % (rows, exported.rows): exported.rows == rows,
        "the report counts %d jobs (got %d)" % (rows, files.report["jobs"]):
            files.report["jobs"] == rows,
        "the report counts %d succeeded (got %s)" % (succeeded, overall["status"]):
            overall["status"]["succeeded"] == succeeded
            and overall["status"]["scheduled"] == rows - succeeded,
        "lateness p50 is 5 ms (got %s)" % overall["lateness_ms"]["p50"]:
            overall["lateness_ms"]["p50"] == 5.0,
    }
    for text, ok in checks.items():
        print("%s %s" % ("ok  " if ok else "FAIL", text))
    print("report: %s" % files.html)
    return [text for text, ok in checks.items() if not ok]


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    opts = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="delayq-cluster-demo-"))
    from django_delayq.embedded import start

    redis, url = start(workdir / "redis", tcp=True, persistence=False)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _setup_django(workdir, url)
        master, procs = start_cluster(workdir)
        failed = run(master, workdir, opts.rows)
    finally:
        stop(procs)
        redis.terminate()
        redis.wait()
        if not opts.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("spark-cluster-demo: %s" % ("FAILED: %s" % "; ".join(failed) if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
