"""The report on rows a real worker made (``workers.py``: succeeded, retried, dead,
retrying, expired, cancelled, scheduled), exported, then compared figure by figure with
a plain pandas computation from the same rows in the database (``plain.py``), the
failed attempts with the database's ``JobAttempt`` rows.

The rows are made once for the module and exported to Parquet (once before the worker
runs, then twice after: incrementally, attempt rows read again within the overlap),
also into a directory begun the way a version from before attempt rows were exported
left it, and copied out of the database, then deleted, so the tests here read the
exports and the copy, and no other test ever sees them.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from django.core.management import call_command
from django.test import override_settings

from tests.conftest import unique_prefix
from tests.spark import plain, workers
from tests.spark.earlier import as_an_earlier_version_left_it

pytestmark = pytest.mark.django_db  # the test database exists; the rows are the fixture's

CLOSE = 0.0011  # two roundings to 3 decimals of floats that may differ in the 12th digit


@dataclass(frozen=True)
class Made:
    root: Path  # exported with attempt rows, in three runs
    old: Path  # begun without attempt rows, as an earlier version did
    untyped: Path  # without error_type, like an export made before the column
    rows: list[dict[str, Any]]  # the audit rows as the database held them
    attempts: list[dict[str, Any]]  # the attempt rows as the database held them


@pytest.fixture(scope="module")
def made(django_db_setup: Any, django_db_blocker: Any, redis_server: Any,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Made]:
    from django.conf import settings

    from django_delayq.core.connection import reset
    from django_delayq.models import Job, JobAttempt
    from django_delayq.spark.export import export_jobs

    base = tmp_path_factory.mktemp("workers")
    root, old, untyped = base / "export", base / "old", base / "untyped"

    def midway() -> None:  # every job scheduled, none run: no attempt row yet
        export_jobs(root, progress=False, settle=timedelta(0))
        export_jobs(old, progress=False, settle=timedelta(0))
        as_an_earlier_version_left_it(old)

    delayq = {**settings.DELAYQ, "REDIS_URL": redis_server.url, "PREFIX": unique_prefix()}
    with django_db_blocker.unblock(), override_settings(DELAYQ=delayq):
        reset()
        try:
            rows = workers.make_rows(midway)
            attempts = workers.attempt_rows()
            for _ in range(2):
                export_jobs(root, progress=False, settle=timedelta(0))
            export_jobs(old, progress=False, settle=timedelta(0))
            export_jobs(untyped, progress=False, settle=timedelta(0), exclude=["error_type"])
        finally:
            JobAttempt.objects.all().delete()
            Job.objects.all().delete()
            reset()
    yield Made(root=root, old=old, untyped=untyped, rows=rows, attempts=attempts)


def _report_of(root: Path, out: Path) -> Path:
    call_command("delayq_report", "--input", str(root), "--out", str(out),
                 stdout=io.StringIO(), stderr=io.StringIO())
    return out


@pytest.fixture(scope="module")
def report_dir(made: Made, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _report_of(made.root, tmp_path_factory.mktemp("report") / "report")


@pytest.fixture(scope="module")
def old_report_dir(made: Made, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _report_of(made.old, tmp_path_factory.mktemp("report") / "old")


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


def _compare(report: dict[str, Any], rows: list[dict[str, Any]],
             attempts: list[dict[str, Any]] | None) -> None:
    expected = plain.figures(rows, attempts)
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


def test_every_figure_matches_a_plain_computation(made: Made, report_dir: Path) -> None:
    report = _report(report_dir)
    assert report["failed_attempts_available"] is True
    _compare(report, made.rows, made.attempts)


def test_expired_jobs_are_a_final_status_of_their_own(made: Made, report_dir: Path) -> None:
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


def test_expired_jobs_are_drawn_with_the_dead_ones(made: Made, report_dir: Path) -> None:
    from django_delayq.spark.charts import _plt, draw_failures

    plt = _plt()
    fig, (ax, bars) = plt.subplots(1, 2)
    draw_failures(ax, bars, _report(report_dir))
    lines = {line.get_label(): sum(line.get_ydata()) for line in ax.get_lines()}
    plt.close(fig)
    assert lines["default expired"] == workers.EXPIRED_JOBS
    assert lines["emails dead"] == workers.DEAD_JOBS


def test_error_groups_count_failed_attempts_and_dead_jobs_apart(made: Made,
                                                                report_dir: Path) -> None:
    report = _report(report_dir)
    top = {e["error"]: e for e in report["groups"][0]["top_errors"]}

    def figures(kind: str) -> tuple[int, int, int]:
        return top[kind]["failed_attempts"], top[kind]["dead_jobs"], top[kind]["failed_jobs"]

    # failed once, then succeeded: every failed attempt counts, no job died
    assert figures("django_delayq.exceptions.Retry") == (workers.RETRIED_JOBS, 0,
                                                         workers.RETRIED_JOBS)
    # two attempts each, then dead; the timestamp in the message splits nothing
    assert figures("builtins.RuntimeError") == (2 * workers.DEAD_JOBS, workers.DEAD_JOBS,
                                                workers.DEAD_JOBS)
    assert top["builtins.RuntimeError"]["example"] == min(
        workers.DECLINED % i for i in range(workers.DEAD_JOBS))
    value = workers.RETRYING_JOBS + workers.CANCELLED_RETRYING  # retrying, or cancelled so
    assert figures("builtins.ValueError") == (value, 0, value)
    assert len(top) == 3
    assert sum(e["failed_attempts"] for e in top.values()) == workers.FAILED_ATTEMPTS
    with (report_dir / "errors.csv").open() as fh:
        lines = list(csv.DictReader(fh))
    assert list(lines[0]) == ["queue", "callable", "error", "failed_attempts", "dead_jobs",
                              "failed_jobs", "example"]
    runtime = next(r for r in lines if r["error"] == "builtins.RuntimeError")
    assert (runtime["failed_attempts"], runtime["dead_jobs"]) == (str(2 * workers.DEAD_JOBS),
                                                                  str(workers.DEAD_JOBS))
    page = (report_dir / "report.html").read_text()
    assert "<th>failed attempts</th><th>dead jobs</th><th>failed jobs</th>" in page
    assert "the attempts that raised it" in page and "unavailable" not in page


def test_attempt_rows_read_again_are_counted_once(made: Made, report_dir: Path) -> None:
    """The second and third exports ran within the overlap of the first: they read every
    attempt row again, so the files hold copies, and the report counts each row once."""
    files = ds.dataset(made.root / "attempts", format="parquet", partitioning="hive")
    ids = files.to_table(columns=["id"]).column("id").to_pylist()
    assert len(ids) == 2 * workers.FAILED_ATTEMPTS
    assert sorted(set(ids)) == sorted(a["id"] for a in made.attempts)
    overall = _report(report_dir)["groups"][0]
    assert sum(e["failed_attempts"] for e in overall["top_errors"]) == len(made.attempts)


def test_an_export_begun_without_attempt_rows_says_the_figure_is_unavailable(
        made: Made, old_report_dir: Path) -> None:
    report = _report(old_report_dir)
    assert report["failed_attempts_available"] is False
    _compare(report, made.rows, None)  # failed_attempts null everywhere; the rest exact
    assert not (made.old / "attempts").exists()
    with (old_report_dir / "errors.csv").open() as fh:
        lines = list(csv.DictReader(fh))
    assert lines and {r["failed_attempts"] for r in lines} == {""}
    page = (old_report_dir / "report.html").read_text()
    assert "<b>Failed attempts: unavailable.</b>" in page
    errors = page.split("Most frequent errors", 1)[1]
    assert "<td>n/a</td>" in errors and "<td>0</td><td>%d</td>" % workers.RETRIED_JOBS \
        in errors  # the Retry row: no dead job, its failed jobs, never under the attempt name


def test_the_failures_chart_says_what_its_bars_count(made: Made, report_dir: Path,
                                                      old_report_dir: Path) -> None:
    from django_delayq.spark.charts import _plt, draw_failures

    plt = _plt()
    for where, light in ((report_dir, "failed attempts"),
                         (old_report_dir, "jobs whose last failure it was")):
        fig, (ax, bars) = plt.subplots(1, 2)
        draw_failures(ax, bars, _report(where))
        labels = [t.get_text() for t in bars.get_legend().get_texts()]
        plt.close(fig)
        assert labels[0].startswith(light) and labels[1] == "jobs that ended dead"


def test_without_error_types_no_message_is_cut_inside_a_timestamp(made: Made,
                                                                   spark: Any) -> None:
    """Read without ``error_type`` (an export made before the column existed), the type
    comes from a class path leading the message, which these messages do not have: one
    group, named as such; the expired jobs are in no group."""
    from django_delayq.spark.constants import UNKNOWN_TYPE
    from django_delayq.spark.source import read_attempts, read_jobs
    from django_delayq.spark.summary import compute_report

    report = compute_report(read_jobs(spark, made.untyped),
                            attempts=read_attempts(spark, made.untyped))
    failed = workers.RETRIED_JOBS + workers.DEAD_JOBS + workers.RETRYING_JOBS + \
        workers.CANCELLED_RETRYING
    assert [(e["error"], e["failed_attempts"], e["dead_jobs"], e["failed_jobs"])
            for e in report["groups"][0]["top_errors"]] == [
        (UNKNOWN_TYPE, workers.FAILED_ATTEMPTS, workers.DEAD_JOBS, failed)]
    assert report["groups"][0]["status"]["expired"] == workers.EXPIRED_JOBS
