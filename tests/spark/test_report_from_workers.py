"""The report on rows a real worker made (``workers.py``: succeeded, retried, dead,
retrying, expired, cancelled, scheduled), exported, then compared figure by figure with
a plain pandas computation from the same rows in the database (``plain.py``).

The rows are made once for the module, exported to Parquet and copied out of the
database, then deleted, so the tests here read the export and the copy, and no other
test ever sees them.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from tests.conftest import unique_prefix
from tests.spark import plain, workers

pytestmark = pytest.mark.django_db  # the test database exists; the rows are the fixture's

CLOSE = 0.0011  # two roundings to 3 decimals of floats that may differ in the 12th digit


@pytest.fixture(scope="module")
def made(django_db_setup: Any, django_db_blocker: Any, redis_server: Any,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
    """(export directory, the audit rows as the database held them)."""
    from django.conf import settings

    from django_delayq.core.connection import reset
    from django_delayq.models import Job, JobAttempt
    from django_delayq.spark.export import export_jobs

    root = tmp_path_factory.mktemp("workers") / "export"
    delayq = {**settings.DELAYQ, "REDIS_URL": redis_server.url, "PREFIX": unique_prefix()}
    with django_db_blocker.unblock(), override_settings(DELAYQ=delayq):
        reset()
        try:
            rows = workers.make_rows()
            export_jobs(root, progress=False, settle=timedelta(0))
            export_jobs(root.with_name("untyped"), progress=False, settle=timedelta(0),
                        exclude=["error_type"])  # like an export made before the column
        finally:
            JobAttempt.objects.all().delete()
            Job.objects.all().delete()
            reset()
    yield root, rows


@pytest.fixture(scope="module")
def report_dir(made: tuple[Path, list[dict[str, Any]]], spark: Any,
               tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report"
    call_command("delayq_report", "--input", str(made[0]), "--out", str(out),
                 stdout=io.StringIO(), stderr=io.StringIO())
    return out


def _report(report_dir: Path) -> dict[str, Any]:
    return json.loads((report_dir / "report.json").read_text())


def _same(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        assert set(got) >= set(want), where
        for key, value in want.items():
            _same(got[key], value, "%s.%s" % (where, key))
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, "%s[%d]" % (where, i))
    elif isinstance(want, float):
        assert got is not None and abs(got - want) <= CLOSE, (where, got, want)
    else:
        assert got == want, (where, got, want)


def test_every_figure_matches_a_plain_computation(made: Any, report_dir: Path) -> None:
    rows = made[1]
    report = _report(report_dir)
    expected = plain.figures(rows)
    got = {(g["queue"], g["callable"]): g for g in report["groups"]}
    assert report["jobs"] == len(rows) == workers.TOTAL
    assert set(got) == set(expected)
    compared = 0
    for level, want in expected.items():
        _same(got[level], want, "%s/%s" % level)
        compared += 1
    assert compared == 7  # 4 callables, 2 queues, overall
    buckets = plain.series(rows, report["bucket_seconds"])
    points = {(p["queue"], p["bucket"]): p for p in report["series"]}
    for key, want in buckets.items():
        _same(points[key], want, "series %s %s" % key)
    assert sum(p["finished"] for p in report["series"] if p["queue"] == "*") == \
        sum(want["finished"] for (queue, _), want in buckets.items() if queue == "*")


def test_expired_jobs_are_a_final_status_of_their_own(made: Any, report_dir: Path) -> None:
    report = _report(report_dir)
    overall = report["groups"][0]
    assert overall["status"]["expired"] == workers.EXPIRED_JOBS
    assert sum(overall["status"].values()) == overall["jobs"]  # every job in one column
    assert overall["throughput"]["finished"] == workers.TOTAL - workers.LIVE_JOBS - \
        workers.RETRYING_JOBS  # finished: succeeded, dead, cancelled and expired
    assert overall["attempts"]["0"] == workers.EXPIRED_JOBS + workers.CANCELLED_JOBS
    assert sum(p["expired"] for p in report["series"] if p["queue"] == "default") == \
        workers.EXPIRED_JOBS
    for group in report["groups"]:  # no "expired at 2026-11-27T03" error type, anywhere
        assert all("expired" not in e["error"] and "T0" not in e["error"]
                   for e in group["top_errors"])
    with (report_dir / "summary.csv").open() as fh:
        assert next(csv.DictReader(fh))["expired"] == str(workers.EXPIRED_JOBS)
    page = (report_dir / "report.html").read_text()
    assert "<th>expired</th>" in page and "<th>waiting</th>" in page


def test_expired_jobs_are_drawn_with_the_dead_ones(made: Any, report_dir: Path) -> None:
    from django_delayq.spark.charts import _plt, draw_failures

    plt = _plt()
    fig, (ax, bars) = plt.subplots(1, 2)
    draw_failures(ax, bars, _report(report_dir))
    lines = {line.get_label(): sum(line.get_ydata()) for line in ax.get_lines()}
    plt.close(fig)
    assert lines["default expired"] == workers.EXPIRED_JOBS
    assert lines["emails dead"] == workers.DEAD_JOBS


def test_error_groups_count_failed_jobs_and_dead_jobs_apart(made: Any,
                                                            report_dir: Path) -> None:
    report = _report(report_dir)
    top = {e["error"]: e for e in report["groups"][0]["top_errors"]}
    retry = top["django_delayq.exceptions.Retry"]  # failed once, then succeeded
    assert (retry["failed_jobs"], retry["dead_jobs"]) == (workers.RETRIED_JOBS, 0)
    boom = top["builtins.RuntimeError"]  # the timestamp in the message splits nothing
    assert (boom["failed_jobs"], boom["dead_jobs"]) == (workers.DEAD_JOBS, workers.DEAD_JOBS)
    assert boom["example"] == min(workers.DECLINED % i for i in range(workers.DEAD_JOBS))
    value = top["builtins.ValueError"]  # retrying, or cancelled while retrying
    assert (value["failed_jobs"], value["dead_jobs"]) == (
        workers.RETRYING_JOBS + workers.CANCELLED_RETRYING, 0)
    assert len(top) == 3
    with (report_dir / "errors.csv").open() as fh:
        header = next(csv.reader(fh))
    assert header == ["queue", "callable", "error", "failed_jobs", "dead_jobs", "example"]
    page = (report_dir / "report.html").read_text()
    assert "<th>failed jobs</th><th>dead jobs</th>" in page
    assert "whose last failed\nattempt raised it" in page


def test_without_error_types_no_message_is_cut_inside_a_timestamp(made: Any,
                                                                   spark: Any) -> None:
    """Read without ``error_type`` (an export made before the column existed), the type
    comes from a class path leading the message, which these messages do not have: one
    group, named as such; the expired jobs are in no group."""
    from django_delayq.spark.constants import UNKNOWN_TYPE
    from django_delayq.spark.source import read_jobs
    from django_delayq.spark.summary import compute_report

    report = compute_report(read_jobs(spark, made[0].with_name("untyped")))
    failed = workers.RETRIED_JOBS + workers.DEAD_JOBS + workers.RETRYING_JOBS + \
        workers.CANCELLED_RETRYING
    assert [(e["error"], e["failed_jobs"], e["dead_jobs"])
            for e in report["groups"][0]["top_errors"]] == [
        (UNKNOWN_TYPE, failed, workers.DEAD_JOBS)]
    assert report["groups"][0]["status"]["expired"] == workers.EXPIRED_JOBS
