"""The report as an operator meets it: errors of one type are one row whatever their
messages, empty minutes are zeros (and gaps in lateness), progress printed while Spark
works."""

from __future__ import annotations

import io
import json
import math
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from django_delayq.spark.export import export_jobs
from tests.helpers import wait_until
from tests.spark.data import ADD, BASE, _job, save_jobs
from tests.spark.test_report import _frame

pytestmark = pytest.mark.django_db

NOW = BASE + timedelta(hours=1)
MESSAGES = ["card %d declined by the bank" % n for n in range(5)]


def _declined() -> list[dict[str, Any]]:
    """100 dead jobs, one exception type, five different messages, over 100 seconds."""
    return [_job("d%03d" % i, "default", ADD, "dead", BASE + timedelta(seconds=i), 2.0, 3.0,
                 3, MESSAGES[i % 5], "shop.errors.CardDeclined") for i in range(100)]


def test_one_exception_type_with_five_messages_is_one_error_row(tmp_path: Path,
                                                               spark: Any) -> None:
    save_jobs(_declined())
    export_jobs(tmp_path / "export", now=NOW, progress=False)
    err = io.StringIO()
    call_command("delayq_report", "--input", str(tmp_path / "export"), "--out",
                 str(tmp_path / "report"), stdout=io.StringIO(), stderr=err)
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    for group in report["groups"]:  # the callable, its queue, overall: one row each
        assert [(e["error"], e["failed_jobs"], e["dead_jobs"]) for e in group["top_errors"]] == [
            ("shop.errors.CardDeclined", 100, 100)]
        assert group["top_errors"][0]["example"] == min(MESSAGES)
    page = (tmp_path / "report" / "report.html").read_text()
    errors = page.split("Most frequent errors", 1)[1]
    assert errors.count("shop.errors.CardDeclined") == 1 and "<td>100</td>" in errors
    rows = (tmp_path / "report" / "errors.csv").read_text().splitlines()
    assert len(rows) == 1 + 3  # header + callable, queue and overall levels
    lines = err.getvalue().splitlines()  # the steps, as Spark works
    for step in ("reading jobs from", "counting jobs", "summary per queue and callable",
                 "attempts and errors", "time series", "writing JSON, CSV, charts"):
        assert any(step in line and line.endswith(" ...") for line in lines), step
        assert any(step in line and " done in " in line for line in lines), step


def test_empty_minutes_are_zeros_and_lateness_breaks_there(spark: Any) -> None:
    from django_delayq.spark.charts import _plt, draw_lateness, draw_throughput
    from django_delayq.spark.summary import compute_report

    jobs = [_job("g%d" % i, "default", ADD, "succeeded", BASE + timedelta(minutes=m), 4.0,
                 1.0, 1) for i, m in enumerate((0, 0, 1, 5, 6))]
    report = compute_report(_frame(spark, jobs), bucket_seconds=60)
    plt = _plt()
    fig, (late, through) = plt.subplots(1, 2)
    draw_lateness(late, report)
    draw_throughput(through, report)
    [per_minute] = [list(line.get_ydata()) for line in through.get_lines()]
    p50 = list(late.get_lines()[0].get_ydata())
    plt.close(fig)
    assert per_minute == [2, 1, 0, 0, 0, 1, 1]  # every minute, 12:00 to 12:06
    assert p50[:2] == [4.0, 4.0] and p50[5:] == [4.0, 4.0]
    assert all(math.isnan(v) for v in p50[2:5])  # no line drawn across 12:02-12:04


def test_running_stages_are_reported_while_spark_works(spark: Any, tmp_path: Path) -> None:
    """A stage whose tasks wait for a file: its progress is printed while it runs."""
    from django_delayq.spark.stages import StageProgress

    release = tmp_path / "release"

    def wait_for_release(part: Any) -> Any:
        import os
        import time

        while not os.path.exists(str(release)):
            time.sleep(0.05)
        return part

    out = io.StringIO()
    done = threading.Event()
    with StageProgress(spark, out, every=0.2) as steps:
        def work() -> None:
            with steps.step("waiting stage"):
                spark.sparkContext.parallelize(range(4), 2).mapPartitions(
                    wait_for_release).count()
            done.set()

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        try:
            wait_until(lambda: "tasks (" in out.getvalue(), timeout=120)
        finally:
            release.write_text("go")
        assert done.wait(120)
    stage_lines = [line for line in out.getvalue().splitlines() if "tasks (" in line]
    assert stage_lines[0].startswith("delayq_report:   stage ")
    assert "/2 tasks (" in stage_lines[0]
    assert "delayq_report: waiting stage done in " in out.getvalue()
