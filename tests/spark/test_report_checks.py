"""What the report leaves out, it says: attempt rows whose job is not in the data are
counted in ``attempts_without_job`` (report.json, the page), not dropped in silence."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from django_delayq.models import Job, JobAttempt
from django_delayq.spark.export import export_jobs
from tests.spark import plain
from tests.spark.data import BASE, known_jobs, save_jobs
from tests.spark.test_export_attempts import _fail, _jobs
from tests.spark.test_report_from_workers import _same
from tests.spark.workers import ATTEMPT_COLUMNS, COLUMNS

pytestmark = pytest.mark.django_db

NOW = BASE + timedelta(days=2)


def _exact(report: dict[str, Any], rows: list[dict[str, Any]],
           attempts: list[dict[str, Any]] | None) -> None:
    """Every figure of every level, as plain pandas computes it from the rows."""
    expected = plain.figures(rows, attempts)
    got = {(g["queue"], g["callable"]): g for g in report["groups"]}
    assert report["jobs"] == len(rows) and set(got) == set(expected)
    for level, want in expected.items():
        _same(got[level], want, "%s/%s" % level)


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
