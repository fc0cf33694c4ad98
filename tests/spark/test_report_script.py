"""``report.py`` run as a script, as ``spark-submit`` runs it: its own folder is then
first on ``sys.path``, so a module of ``django_delayq/spark/`` named like a standard
library module (``html.py``) would be imported in its place, by the standard library
itself, and the script would die at import."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from subprocess import run

import pytest

import django_delayq.spark
from django_delayq.spark.export import export_jobs
from tests.spark.data import BASE, known_jobs, save_jobs

ROOT = Path(__file__).resolve().parents[2]
SPARK_DIR = Path(django_delayq.spark.__file__).parent
SCRIPT = SPARK_DIR / "report.py"
# As the ``spark`` fixture's session: the JVM's quick compiler and the serial collector.
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _env() -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "JAVA_HOME", "HOME")}
    return {**keep, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


def test_no_module_of_the_spark_package_shadows_a_standard_library_one() -> None:
    names = {p.stem for p in SPARK_DIR.glob("*.py")}
    assert not names & set(sys.stdlib_module_names)


def test_report_script_starts_as_a_script() -> None:
    done = run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True,
               env=_env(), cwd=str(SPARK_DIR), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--input" in done.stdout and "--bucket-seconds" in done.stdout


@pytest.mark.django_db
def test_spark_submit_runs_the_report_script(tmp_path: Path) -> None:
    from pyspark.find_spark_home import _find_spark_home  # lazy: the Spark extra

    submit = Path(_find_spark_home()) / "bin" / "spark-submit"
    save_jobs(known_jobs())
    export_jobs(tmp_path / "export", now=BASE + timedelta(days=2), progress=False)
    done = run([str(submit), "--master", "local[1]",
                "--conf", "spark.driver.extraJavaOptions=" + JAVA_OPTIONS,
                "--conf", "spark.ui.enabled=false",
                "--conf", "spark.sql.shuffle.partitions=2",
                str(SCRIPT), "--input", str(tmp_path / "export"),
                "--out", str(tmp_path / "report")],
               capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("report: %s" % (tmp_path / "report" / "report.html"))
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["jobs"] == 111
