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
    assert [(e["error"], e["count"]) for e in top] == expected
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
    bars = error_bars(ax, [{"error": n, "count": 5 - i} for i, n in enumerate(names)])
    labels = [t.get_text() for t in ax.get_yticklabels()]
    _plt().close(fig)
    assert len(bars) == 5
    assert sorted(label.replace("\n", "") for label in labels) == sorted(names)


def test_summary_fits_without_sideways_scrolling(spark: Any, tmp_path: Any) -> None:
    from django_delayq.spark.html import MAX_COLUMNS
    from django_delayq.spark.report import write_outputs
    from django_delayq.spark.summary import compute_report

    jobs, _ = _retrying_and_finished()
    page = write_outputs(compute_report(_frame(spark, jobs)), tmp_path).html.read_text()
    tables = re.findall(r"<table><tr>(.*?)</tr>", page)
    assert len(tables) >= 2
    assert all(t.count("<th>") <= MAX_COLUMNS for t in tables)
    assert "overflow-x" not in page
