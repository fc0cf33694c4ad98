"""The report reads the files delayq_export and delayq_prune recorded writing, checks what
it reads against those records, and says what it leaves out.

- attempt files gone, emptied, or a marker that the records contradict: refused with one
  line, never a failed-attempt figure of 0;
- Parquet files no record lists (even named as the writers name them): not read,
  counted in ``unrecorded_files``;
- attempt rows whose job is not in the data: counted in ``attempts_without_job``;
- rows of two databases in one directory: refused, by the export, the archive and the
  report (ids of one database name other rows in another).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command

from django_delayq.models import Job, JobAttempt
from django_delayq.spark.export import export_jobs
from django_delayq.spark.preflight import ATTEMPTS_MARKER, RECORDS_DIR
from django_delayq.spark.prune import prune_jobs
from tests.spark import plain
from tests.spark.data import BASE, known_jobs, save_jobs
from tests.spark.earlier import as_an_earlier_version_left_it
from tests.spark.test_export_attempts import _fail, _jobs
from tests.spark.test_report_from_workers import _same
from tests.spark.workers import ATTEMPT_COLUMNS, COLUMNS

pytestmark = pytest.mark.django_db

NOW = BASE + timedelta(days=2)
ROOT = Path(__file__).resolve().parents[2]


def _made(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Known jobs, 10 timeouts of jobs that then succeeded and 30 ``ValueError``s of jobs
    that died, exported; returns the rows as the database holds them."""
    save_jobs(known_jobs())
    _fail(_jobs(81, 90))
    _fail(_jobs(91, 100), times=3, kind="builtins.ValueError")
    export_jobs(root, now=NOW, progress=False)
    return (list(Job.objects.values(*COLUMNS)),
            list(JobAttempt.objects.values(*ATTEMPT_COLUMNS)))


def _report(root: Path | str, out: Path) -> dict[str, Any]:
    err = io.StringIO()
    call_command("delayq_report", "--input", str(root), "--out", str(out),
                 stdout=io.StringIO(), stderr=err)
    report = dict(json.loads((out / "report.json").read_text()))
    report["_stderr"] = err.getvalue()
    return report


def _exact(report: dict[str, Any], rows: list[dict[str, Any]],
           attempts: list[dict[str, Any]] | None) -> None:
    """Every figure of every level, as plain pandas computes it from the rows."""
    expected = plain.figures(rows, attempts)
    got = {(g["queue"], g["callable"]): g for g in report["groups"]}
    assert report["jobs"] == len(rows) and set(got) == set(expected)
    for level, want in expected.items():
        _same(got[level], want, "%s/%s" % level)


def _refused(root: Path, out: Path, message: str) -> str:
    """The report stops with one line matching ``message`` and writes nothing."""
    with pytest.raises(CommandError) as raised:
        call_command("delayq_report", "--input", str(root), "--out", str(out),
                     stdout=io.StringIO(), stderr=io.StringIO())
    text = str(raised.value)
    assert "\n" not in text and re.search(message, text), text
    assert not (out / "report.json").exists()
    return text


def test_a_marker_whose_attempt_files_are_gone_is_refused(tmp_path: Path, spark: Any) -> None:
    from django_delayq.spark.source import read_attempts

    root = tmp_path / "export"
    _made(root)
    shutil.rmtree(root / "attempts")
    _refused(root, tmp_path / "report", r"^%s/attempts: 1 file\(s\) its records list are not "
             r"there \(attempts/day=2025-03-01/export-\S+\.parquet\): restore them, or "
             r"export to a new directory$" % re.escape(str(root)))
    with pytest.raises(ValueError, match=r"attempts: a file its records list cannot be read"):
        read_attempts(spark, "file://%s" % root)  # Spark's to read: its error, in one line


def test_attempt_or_job_files_emptied_are_refused(tmp_path: Path, spark: Any) -> None:
    root = tmp_path / "export"
    _, attempts = _made(root)
    top = max(a["id"] for a in attempts)
    [attempt_file] = (root / "attempts").rglob("*.parquet")
    table = pq.ParquetFile(attempt_file).read()
    pq.write_table(table.slice(0, 0), attempt_file)  # the same file, no rows
    _refused(root, tmp_path / "report", r"%s/attempts does not hold the attempt rows its "
             r"records list: read 0 \(highest id None\), recorded 40 \(highest id %d\)"
             % (re.escape(str(root)), top))
    pq.write_table(table.slice(0, 39), attempt_file)  # one row short
    _refused(root, tmp_path / "report", r"read 39 \(highest id \d+\), recorded 40")
    pq.write_table(table, attempt_file)
    [job_file] = (root / "jobs").rglob("*.parquet")
    pq.write_table(pq.ParquetFile(job_file).read().slice(0, 100), job_file)
    _refused(root, tmp_path / "report", r"%s/jobs does not hold the job rows its records "
             r"list: read 100, recorded 111" % re.escape(str(root)))


def test_a_marker_the_records_contradict_is_refused(tmp_path: Path, spark: Any) -> None:
    """A directory begun before attempt rows were exported, with a marker put there: its
    records say its runs wrote none. Without the marker: the figure is unavailable."""
    root = tmp_path / "export"
    rows, _ = _made(root)
    as_an_earlier_version_left_it(root)
    export_jobs(root, now=NOW + timedelta(minutes=1), progress=False)  # records its files
    (root / ATTEMPTS_MARKER).write_text(json.dumps({"meaning": "every job row ..."}))
    _refused(root, tmp_path / "report", r"%s says every job row there has its attempt rows, "
             r"but 1 of its file records say their run wrote none \(adopted-\S+\.json\)"
             % re.escape(str(root / ATTEMPTS_MARKER)))
    (root / ATTEMPTS_MARKER).unlink()
    report = _report(root, tmp_path / "report")
    assert report["failed_attempts_available"] is False
    _exact(report, rows, None)


def test_a_directory_without_records_is_refused_until_a_run_records_its_files(
        tmp_path: Path, spark: Any) -> None:
    root = tmp_path / "export"
    rows, _ = _made(root)
    as_an_earlier_version_left_it(root)
    _refused(root, tmp_path / "report", r"%s holds 1 Parquet files but no record of what "
             r"delayq wrote there .*: run delayq_export --out %s \(or delayq_prune --archive "
             r"%s\) once to record them" % ((re.escape(str(root)),) * 3))
    call_command("delayq_export", "--out", str(root), "--settle", "0", verbosity=0,
                 stdout=io.StringIO())
    [record] = (root / RECORDS_DIR).iterdir()
    body = json.loads(record.read_text())
    assert record.name.startswith("adopted-") and body["attempts_complete"] is False
    assert [(f["path"].split("/")[0], f["rows"]) for f in body["files"]] == [("jobs", 111)]
    report = _report(root, tmp_path / "report")
    assert report["unrecorded_files"] == 0
    _exact(report, rows, None)


def test_parquet_files_no_record_lists_are_not_read_and_are_counted(tmp_path: Path,
                                                                    spark: Any) -> None:
    """Files another export wrote (more failures, one more job), copied in under the
    names the writers give, and one under another name: none is read."""
    root, other = tmp_path / "export", tmp_path / "other"
    rows, attempts = _made(root)
    _fail(_jobs(1, 20), kind="shop.errors.Planted")
    save_jobs([dict(known_jobs()[0], id="x001")])
    export_jobs(other, now=NOW, progress=False)
    planted = []
    for found in sorted((other / "jobs").rglob("*.parquet")) + sorted(
            (other / "attempts").rglob("*.parquet")):
        planted.append(root / found.relative_to(other))
        shutil.copy(found, planted[-1])
    shutil.copy(planted[-1], planted[-1].parent / "extra.parquet")
    report = _report(root, tmp_path / "report")
    assert report["unrecorded_files"] == 3
    assert "3 Parquet files under %s not read" % root in report["_stderr"]
    _exact(report, rows, attempts)
    assert "<b>3 Parquet files not read:</b>" in (tmp_path / "report" / "report.html").read_text()
    url = _report("file://%s" % root, tmp_path / "url")  # listed by Spark, not Python
    assert url["unrecorded_files"] == 3
    _exact(url, rows, attempts)


def test_attempt_rows_whose_job_is_not_in_the_data_are_counted(tmp_path: Path,
                                                               spark: Any) -> None:
    """The jobs of one queue only (your own code may filter them before the report): the
    other queue's attempt rows are in no error row, and the report says how many."""
    from pyspark.sql import functions as F

    from django_delayq.spark.report import write_outputs
    from django_delayq.spark.source import read_attempts, read_jobs
    from django_delayq.spark.summary import compute_report

    root = tmp_path / "export"
    save_jobs(known_jobs())
    _fail(_jobs(91, 100), kind="builtins.ValueError")
    _fail(["e009", "e010"], kind="shop.errors.Smtp")
    export_jobs(root, now=NOW, progress=False)
    jobs = read_jobs(spark, root)
    whole = compute_report(jobs, attempts=read_attempts(spark, root))
    assert whole["attempts_without_job"] == 0
    report = compute_report(jobs.filter(F.col("queue") == "default"),
                            attempts=read_attempts(spark, root))
    assert report["attempts_without_job"] == 2
    _exact(report, list(Job.objects.filter(queue="default").values(*COLUMNS)),
           list(JobAttempt.objects.values(*ATTEMPT_COLUMNS)))
    files = write_outputs(report, tmp_path / "report")
    assert json.loads(files.json.read_text())["attempts_without_job"] == 2
    page = files.html.read_text()
    assert "<b>2 attempt rows not counted:</b> their job is not in this data" in page
    assert "not counted" not in write_outputs(whole, tmp_path / "whole").html.read_text()


OTHER_DATABASE = """
import sys
from datetime import timedelta

import django

django.setup()
from django.core.management import call_command

call_command("migrate", verbosity=0)
from django_delayq.models import JobAttempt
from django_delayq.spark.export import export_jobs
from tests.spark.data import BASE, known_jobs, save_jobs

save_jobs(known_jobs())
for job_id in ("a001", "a002"):
    JobAttempt.objects.create(job_id=job_id, number=1, outcome="retrying",
                              error_type="other.Error", error="other database")
export_jobs(sys.argv[1], now=BASE + timedelta(days=2), progress=False)
"""


def _other_database_export(tmp_path: Path) -> tuple[Path, Path]:
    """The same jobs (ids included) and two attempt rows (ids 1 and 2) in another, fresh
    SQLite database, exported by another process."""
    database, out = tmp_path / "other.sqlite3", tmp_path / "other"
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": os.environ.get("PATH", ""),
           "PYTHONPATH": str(ROOT), "DELAYQ_TEST_SQLITE": str(database)}
    done = subprocess.run([sys.executable, "-c", OTHER_DATABASE, str(out)], env=env,
                          cwd=str(ROOT), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return database, out


def test_one_directory_holds_the_rows_of_one_database(tmp_path: Path, spark: Any) -> None:
    database, other = _other_database_export(tmp_path)
    root = tmp_path / "export"
    rows, attempts = _made(root)
    named = r"another database \(sqlite:%s\)" % re.escape(str(database))
    with pytest.raises(CommandError, match=r"%s was exported from %s, not from this one"
                       % (re.escape(str(other)), named)):
        call_command("delayq_export", "--out", str(other), "--settle", "0", verbosity=0)
    Job.objects.update(finished_at=NOW - timedelta(days=400))
    with pytest.raises(ValueError, match=r"was exported from %s" % named):
        prune_jobs(timedelta(days=30), archive=other, progress=False)
    assert Job.objects.count() == len(rows)  # nothing archived, nothing deleted
    before = sorted(p.name for p in other.rglob("*"))
    (other / "_delayq_export_state.json").unlink()  # an archive directory of that database
    with pytest.raises(ValueError, match=r"%s holds files exported from %s"
                       % (re.escape(str(other)), named)):
        prune_jobs(timedelta(days=30), archive=other, progress=False)
    assert sorted(p.name for p in other.rglob("*")) == [
        n for n in before if n != "_delayq_export_state.json"]
    for sub in ("jobs", "attempts", RECORDS_DIR):  # both exports, files and records, in one
        shutil.copytree(other / sub, root / sub, dirs_exist_ok=True)
    _refused(root, tmp_path / "report", r"^%s holds files exported from 2 databases \(.*sqlite:"
             r"%s.*\): ids of one name other rows in another" % (re.escape(str(root)),
                                                                re.escape(str(database))))
    assert len(attempts) == 40
