"""Lateness, error grouping, charts and the HTML page against figures computed here in
plain Python from the generated rows (never from the code under test)."""

from __future__ import annotations

import collections
import re
import statistics
from datetime import timedelta
from typing import Any

from tests.spark.data import ADD, BASE, _job
from tests.spark.test_report import _frame, _group

MEASURED = ("running", "succeeded", "dead")


def _retrying_and_finished() -> tuple[list[dict[str, Any]], list[float]]:
    """200 jobs whose first attempt started 5 ms late, failed after 20 ms and wait 600 s
    for their next attempt (backoff=[600]): run_at moved on, started_at did not. 50 more
    ran once, i * 3 ms late. Returns the rows and each measured attempt's lateness."""
    jobs, expected = [], []
    for i in range(200):
        due = BASE + timedelta(seconds=i)
        started = due + timedelta(milliseconds=5)
        finished = started + timedelta(milliseconds=20)
        row = _job("r%03d" % i, "default", ADD, "retrying", due, 5.0, 20.0, 1,
                   "timeout for order %d" % i, "shop.errors.Timeout")
        row.update(run_at=finished + timedelta(seconds=600), updated_at=finished)
        jobs.append(row)
    for i in range(1, 51):
        jobs.append(_job("s%03d" % i, "default", ADD, "succeeded",
                         BASE + timedelta(seconds=i), 3.0 * i, 10.0, 1))
        expected.append(3.0 * i)
    return jobs, expected


def test_retrying_rows_do_not_make_lateness_negative(spark: Any) -> None:
    from django_delayq.models import Job
    from django_delayq.spark.summary import compute_report

    jobs, expected = _retrying_and_finished()
    report = compute_report(_frame(spark, jobs))
    late = _group(report, "default", ADD)["lateness_ms"]
    assert late["mean"] == round(statistics.fmean(expected), 3)  # 76.5, not about -479,000
    assert late["max"] == max(expected) and late["p50"] == statistics.median(expected)
    for point in report["series"]:
        assert point["lateness_ms"] is None or point["lateness_ms"]["p50"] >= 0
    fields = {f.name for f in Job._meta.fields}
    retrying = Job(**{k: v for k, v in jobs[0].items() if k in fields})
    assert retrying.lateness_ms() is None
    done = Job(**{k: v for k, v in jobs[-1].items() if k in fields})
    assert done.lateness_ms() == expected[-1]


def test_errors_are_grouped_by_exception_type(spark: Any) -> None:
    from django_delayq.spark.summary import compute_report

    types = ["shop.errors.PaymentDeclined"] * 7 + ["shop.errors.Timeout"] * 4 + [
        "builtins.KeyError"] * 2
    jobs = [_job("d%03d" % i, "default", ADD, "dead", BASE + timedelta(seconds=i), 1.0, 1.0, 3,
                 "order %d: declined by bank ref %d" % (i, 1000 + i), kind)
            for i, kind in enumerate(types)]
    expected = collections.Counter(types).most_common()
    top = _group(compute_report(_frame(spark, jobs)), "default", ADD)["top_errors"]
    assert [(e["error"], e["failed_jobs"]) for e in top] == expected
    assert [e["dead_jobs"] for e in top] == [n for _, n in expected]  # all dead
    assert top[0]["example"] == min("order %d: declined by bank ref %d" % (i, 1000 + i)
                                    for i, k in enumerate(types) if k == types[0])


def test_empty_buckets_are_zeros(spark: Any) -> None:
    from django_delayq.spark.summary import compute_report

    jobs = [_job("z1", "default", ADD, "succeeded", BASE, 1.0, 1.0, 1),
            _job("z2", "default", ADD, "succeeded", BASE + timedelta(minutes=5), 1.0, 1.0, 1)]
    series = [p for p in compute_report(_frame(spark, jobs), bucket_seconds=60)["series"]
              if p["queue"] == "default"]
    assert [p["bucket"][11:16] for p in series] == ["12:00", "12:01", "12:02", "12:03",
                                                   "12:04", "12:05"]
    assert [p["finished"] for p in series] == [1, 0, 0, 0, 0, 1]
    assert [p["started"] for p in series] == [1, 0, 0, 0, 0, 1]


def test_error_bars_keep_whole_distinct_labels() -> None:
    from django_delayq.spark.charts import _plt, error_bars

    long = "myproject.integrations.payments.providers."
    names = [long + "GatewayTimeoutError", long + "GatewayRefusedError", "builtins.KeyError",
             "shop.errors.Timeout", "x" * 90]
    fig, ax = _plt().subplots()
    bars = error_bars(ax, [{"error": n, "failed_attempts": 9 - i, "failed_jobs": 5 - i,
                            "dead_jobs": 1} for i, n in enumerate(names)])
    labels = [t.get_text() for t in ax.get_yticklabels()]
    _plt().close(fig)
    assert len(bars) == 5
    assert sorted(label.replace("\n", "") for label in labels) == sorted(names)


def test_summary_fits_without_sideways_scrolling(spark: Any, tmp_path: Any) -> None:
    from django_delayq.spark.report import write_outputs
    from django_delayq.spark.report_html import MAX_COLUMNS
    from django_delayq.spark.summary import compute_report

    jobs, _ = _retrying_and_finished()
    page = write_outputs(compute_report(_frame(spark, jobs)), tmp_path).html.read_text()
    tables = re.findall(r"<table><tr>(.*?)</tr>", page)
    assert len(tables) >= 2
    assert all(t.count("<th>") <= MAX_COLUMNS for t in tables)
    assert "overflow-x" not in page


def test_rows_without_error_type_fall_back_to_a_leading_class_path(spark: Any) -> None:
    """Rows read without ``error_type`` (null: exports made before the column) take the
    dotted class path before ``": "`` in ``last_error``; a message that does not start with
    one is ``UNKNOWN_TYPE``, never the text before its first colon (inside a timestamp);
    an expired row is no error at all, whatever its message says."""
    from django_delayq.spark.constants import UNKNOWN_TYPE
    from django_delayq.spark.summary import compute_report

    messages = [("dead", "builtins.ValueError: bad input 7"),
                ("succeeded", "shop.errors.Timeout: gateway at 2026-11-27T03:01:30: retried"),
                ("dead", "shop.errors.Timeout: gateway at 2026-11-27T04:11:00: gave up"),
                ("dead", "2026-11-27T03:01:30 gateway down: no answer"),
                ("dead", "gateway down at 03:01"),
                ("expired", "expired at 2026-11-27T03:01:30.251+00:00: not started by then"),
                ("succeeded", "")]
    jobs = []
    for i, (status, message) in enumerate(messages):
        row = _job("l%d" % i, "default", ADD, status, BASE + timedelta(seconds=i), 1.0, 1.0,
                   2, message)
        row["error_type"] = None  # the column was not there
        jobs.append(row)
    top = _group(compute_report(_frame(spark, jobs)), "default", ADD)["top_errors"]
    assert [(e["error"], e["failed_jobs"], e["dead_jobs"]) for e in top] == [
        (UNKNOWN_TYPE, 2, 2), ("shop.errors.Timeout", 2, 1), ("builtins.ValueError", 1, 1)]
    assert top[1]["example"] == messages[1][1]  # ties: more dead jobs first


def test_files_written_before_a_column_existed_are_read_with_the_newer_ones(
        spark: Any, tmp_path: Any) -> None:
    """An export directory holding files without ``error_type`` and ``read_at`` (older
    versions) and files with them, recorded as a run records the files of a directory
    written before records existed: each row keeps what its own file says, whichever
    file Spark opens first to learn the schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from django_delayq.spark import records, schema
    from django_delayq.spark.source import read_jobs
    from django_delayq.spark.summary import compute_report

    old_columns = [c for c in schema.JOB_COLUMNS if c != "error_type"]
    old = [_job("o%d" % i, "default", ADD, "dead", BASE, 1.0, 1.0, 3,
                "builtins.KeyError: 'sku'") for i in range(3)]
    new = [_job("n%d" % i, "default", ADD, "dead", BASE, 1.0, 1.0, 3, "no stock",
                "shop.errors.OutOfStock") for i in range(2)]
    folder = tmp_path / "jobs" / "day=2025-03-01"
    folder.mkdir(parents=True)

    def table(jobs: list[dict[str, Any]], columns: list[str]) -> Any:
        layout = pa.schema([schema.JOB_SCHEMA.field(c) for c in columns])
        return schema.to_table([tuple(j.get(c) for c in columns) for j in jobs], layout,
                               schema.JOB_JSON_FIELDS)

    pq.write_table(table(old, old_columns),
                   folder / "export-20250301T120000Z-0aaaaaaa-000.parquet")
    pq.write_table(table(new, list(schema.JOB_COLUMNS)).append_column(
        pa.field("read_at", schema.TS), pa.array([BASE] * len(new), schema.TS)),
        folder / "export-20261128T120000Z-0bbbbbbb-000.parquet")
    assert records.adopt(tmp_path, "sqlite:/srv/shop.sqlite3") is not None
    rows = {r["id"]: r for r in read_jobs(spark, tmp_path).collect()}
    assert {i: rows[i]["error_type"] for i in rows} == {
        "o0": None, "o1": None, "o2": None,
        "n0": "shop.errors.OutOfStock", "n1": "shop.errors.OutOfStock"}
    top = _group(compute_report(read_jobs(spark, tmp_path)), "default", ADD)["top_errors"]
    assert [(e["error"], e["failed_jobs"]) for e in top] == [
        ("builtins.KeyError", 3), ("shop.errors.OutOfStock", 2)]


def test_labels_written_into_the_database_are_plain_text(tmp_path: Any) -> None:
    """A queue or an error type holding ``$...$`` (a bad formula for matplotlib's math
    text) is drawn as it is: the report's charts never fail on what a row says."""
    from django_delayq.spark.charts import write_charts

    points = [{"bucket": "2026-11-28T12:0%d:00" % i, "queue": "q$x", "dead": i, "expired": 0,
               "retried": 1, "started": 1, "finished": 1,
               "lateness_ms": {"p50": 1.0, "p95": 2.0}}
              for i in range(3)]
    error = {"error": r"$\frac{x$ shop.Boom", "failed_attempts": 3, "failed_jobs": 2,
             "dead_jobs": 1}
    report = {"series": points, "bucket_seconds": 60, "failed_attempts_available": True,
              "groups": [{"queue": "*", "top_errors": [error]}]}
    charts = write_charts(report, tmp_path)
    assert charts["failures"].stat().st_size > 0


def test_the_mean_per_minute_is_never_above_the_peak_minute(spark: Any) -> None:
    """Ten jobs finishing 20 s apart across a minute boundary (five at 12:00:50, five at
    12:01:10): two wall-clock minutes, each counted whole, so 5 a minute on average and
    at the peak (a span under a minute counted as one minute made the mean 10)."""
    from django_delayq.spark.summary import compute_report

    jobs = [_job("m%02d" % i, "default", ADD, "succeeded",
                 BASE + timedelta(seconds=50 if i < 5 else 70), 0.0, 0.0, 1)
            for i in range(10)]
    throughput = _group(compute_report(_frame(spark, jobs)), "default", ADD)["throughput"]
    assert (throughput["per_min_mean"], throughput["per_min_peak"]) == (5.0, 5)
    three = jobs + [_job("m10", "default", ADD, "succeeded", BASE + timedelta(seconds=179),
                         0.0, 0.0, 1)]  # 12:02:59: minutes 12:00, 12:01 and 12:02
    throughput = _group(compute_report(_frame(spark, three)), "default", ADD)["throughput"]
    assert (throughput["per_min_mean"], throughput["per_min_peak"]) == (round(11 / 3, 3), 5)
