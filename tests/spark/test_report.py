"""The report's numbers against data whose answers are known (see ``data.py``)."""

from __future__ import annotations

import base64
import csv
import json
from typing import Any

import pytest

from tests.spark.data import ADD, NOOP, known_jobs


def _frame(spark: Any, jobs: list[dict[str, Any]]) -> Any:
    from django_delayq.spark.source import REPORT_COLUMNS, latest_versions, normalize

    rows = [{c: job.get(c) for c in REPORT_COLUMNS} for job in jobs]
    schema = ("id string, queue string, callable_path string, status string, attempts int, "
              "last_error string, run_at timestamp, created_at timestamp, "
              "updated_at timestamp, started_at timestamp, finished_at timestamp, "
              "error_type string, read_at timestamp")
    return latest_versions(normalize(spark.createDataFrame(rows, schema)))


@pytest.fixture(scope="module")
def report(spark: Any) -> dict[str, Any]:
    from django_delayq.spark.summary import compute_report

    return compute_report(_frame(spark, known_jobs()))


def _group(report: dict[str, Any], queue: str, fn: str) -> dict[str, Any]:
    return next(g for g in report["groups"] if (g["queue"], g["callable"]) == (queue, fn))


def test_levels_cover_callables_queues_and_overall(report: dict[str, Any]) -> None:
    keys = [(g["queue"], g["callable"]) for g in report["groups"]]
    assert keys == [("*", "*"), ("default", "*"), ("default", ADD), ("emails", "*"),
                    ("emails", NOOP)]
    assert report["jobs"] == 111
    assert _group(report, "*", "*")["jobs"] == 111


def test_lateness_percentiles_are_exact(report: dict[str, Any]) -> None:
    # lateness 1..100 ms: linear interpolation at rank p*(n-1)
    assert _group(report, "default", ADD)["lateness_ms"] == {
        "p50": 50.5, "p95": 95.05, "p99": 99.01, "max": 100.0, "mean": 50.5}
    assert _group(report, "emails", NOOP)["lateness_ms"]["p99"] == 1000.0
    # overall: 100 values 1..100 and 8 values of 1000 -> rank 0.5*107 = 53.5
    overall = _group(report, "*", "*")["lateness_ms"]
    assert overall["p50"] == 54.5
    assert overall["max"] == 1000.0


def test_run_duration_percentiles(report: dict[str, Any]) -> None:
    assert _group(report, "default", ADD)["duration_ms"] == {
        "p50": 505.0, "p95": 950.5, "p99": 990.1, "max": 1000.0, "mean": 505.0}
    assert _group(report, "emails", NOOP)["duration_ms"]["p50"] == 5.0


def test_counts_success_rate_and_attempts(report: dict[str, Any]) -> None:
    add = _group(report, "default", ADD)
    assert add["status"] == {"waiting": 0, "scheduled": 0, "running": 0, "retrying": 0,
                             "succeeded": 90, "dead": 10, "cancelled": 0, "expired": 0}
    assert add["success_rate"] == 0.9
    assert add["attempts"] == {"1": 80, "2": 10, "3": 10}
    emails = _group(report, "emails", "*")
    assert emails["status"]["cancelled"] == 2 and emails["status"]["scheduled"] == 1
    assert emails["success_rate"] == 1.0  # cancelled jobs are not failures
    assert emails["attempts"] == {"0": 2, "1": 8}  # the live job is not counted


def test_throughput_and_errors(report: dict[str, Any]) -> None:
    add = _group(report, "default", ADD)["throughput"]
    # finishes from 12:00:01.011 to 12:01:41.100: 100 jobs in the minutes 12:00 and 12:01
    assert add["finished"] == 100
    assert add["per_min_mean"] == 50.0
    assert add["per_min_peak"] == 59  # 12:00:01 .. 12:00:59
    assert _group(report, "default", ADD)["top_errors"] == [
        {"error": "builtins.ValueError", "failed_attempts": None, "dead_jobs": 10,
         "failed_jobs": 10, "example": "bad input for order 100"}]  # no attempt rows here
    assert _group(report, "emails", NOOP)["top_errors"] == []


def test_series_buckets_by_minute(report: dict[str, Any]) -> None:
    assert report["bucket_seconds"] == 60
    default = [p for p in report["series"] if p["queue"] == "default"]
    assert [p["bucket"] for p in default] == ["2025-03-01T12:00:00+00:00",
                                              "2025-03-01T12:01:00+00:00"]
    assert [p["finished"] for p in default] == [59, 41]
    assert default[0]["lateness_ms"]["max"] == 59.0
    assert sum(p["dead"] for p in default) == 10


def test_latest_version_of_a_job_wins(spark: Any) -> None:
    from django_delayq.spark.summary import compute_report

    jobs = known_jobs()[:3]
    newer = dict(jobs[0], status="dead", updated_at=jobs[0]["updated_at"].replace(year=2026))
    result = compute_report(_frame(spark, [*jobs, newer]))
    overall = result["groups"][0]
    assert overall["jobs"] == 3
    assert overall["status"]["dead"] == 1 and overall["status"]["succeeded"] == 2


def test_outputs_json_csv_png_and_self_contained_html(report: dict[str, Any], tmp_path) -> None:
    from django_delayq.spark.report import write_outputs

    files = write_outputs(report, tmp_path)
    assert json.loads(files.json.read_text())["jobs"] == 111
    with files.csv["summary"].open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows[2]["callable"] == ADD and rows[2]["lateness_p95_ms"] == "95.05"
    for png in files.charts.values():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = files.html.read_text()
    assert "src=\"http" not in page and page.count("data:image/png;base64,") == 3
    inlined = page.split("data:image/png;base64,")[1].split('"')[0]
    assert base64.b64decode(inlined) == files.charts["lateness"].read_bytes()
