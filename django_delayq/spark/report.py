"""Run the report end to end: read jobs, compute, write JSON, CSV, PNG and HTML.

Also a ``spark-submit`` entry point that needs no Django when reading Parquet::

    spark-submit --master spark://host:7077 .../django_delayq/spark/report.py \\
        --input /data/delayq --out /data/delayq-report
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from django_delayq.spark import charts, report_html
from django_delayq.spark.constants import FINAL, PERCENTILE_NAMES, STATUSES
from django_delayq.spark.preflight import check_paths, is_url, writable_dir
from django_delayq.spark.session import build_session
from django_delayq.spark.stages import StageProgress

# failed_attempts is empty where the data has no attempt rows (report.json:
# failed_attempts_available false)
ERROR_COLUMNS = ["queue", "callable", "error", "failed_attempts", "dead_jobs", "failed_jobs",
                 "example"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportFiles:
    json: Path
    html: Path
    csv: dict[str, Path]
    charts: dict[str, Path]
    report: dict[str, Any]


def _summary_rows(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        row: dict[str, Any] = {"queue": g["queue"], "callable": g["callable"], "jobs": g["jobs"]}
        row.update({s: g["status"][s] for s in STATUSES})
        row["success_rate"] = g["success_rate"]
        for dist, short in (("lateness_ms", "lateness"), ("duration_ms", "duration")):
            for p in (*PERCENTILE_NAMES, "max", "mean"):
                row["%s_%s_ms" % (short, p)] = g[dist][p]
        row.update({"throughput_" + k: v for k, v in g["throughput"].items()})
        rows.append(row)
    return rows


def _series_rows(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for p in series:
        late = p["lateness_ms"] or {}
        row = {k: p[k] for k in ("queue", "bucket", "started", "finished", *FINAL, "retried")}
        row.update({"lateness_%s_ms" % k: late.get(k) for k in (*PERCENTILE_NAMES, "max")})
        rows.append(row)
    return rows


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_outputs(report: dict[str, Any], out: Path | str) -> ReportFiles:
    out = writable_dir(out)
    json_path = out / "report.json"
    try:
        json_path.write_text(json.dumps(report, indent=2))
    except OSError as exc:
        raise ValueError("cannot write the report to %s: %s (give a directory this process "
                         "can create and write to)" % (out, exc.strerror or exc)) from exc
    groups = report["groups"]
    summary = _summary_rows(groups)
    series = _series_rows(report["series"])
    attempts = [{"queue": g["queue"], "callable": g["callable"], "attempts": int(n), "jobs": c}
                for g in groups for n, c in g["attempts"].items()]
    errors = [{"queue": g["queue"], "callable": g["callable"], **e}
              for g in groups for e in g["top_errors"]]
    csvs = {
        "summary": _write_csv(out / "summary.csv", summary, list(summary[0]) if summary else []),
        "series": _write_csv(out / "series.csv", series, list(series[0]) if series else []),
        "attempts": _write_csv(out / "attempts.csv", attempts,
                               ["queue", "callable", "attempts", "jobs"]),
        "errors": _write_csv(out / "errors.csv", errors, ERROR_COLUMNS),
    }
    pngs = charts.write_charts(report, out)
    html_path = out / "report.html"
    html_path.write_text(report_html.render(report, pngs), encoding="utf-8")
    return ReportFiles(json=json_path, html=html_path, csv=csvs, charts=pngs, report=report)


def run_report(spark: Any, out: Path | str, *, input: Path | str | None = None,
               jdbc_url: str | None = None, jdbc_table: str | None = None,
               jdbc_attempts_table: str | None = None,
               jdbc_properties: Mapping[str, str | None] | None = None,
               bucket_seconds: int | None = None, progress: bool = False,
               stream: TextIO | None = None, progress_every: float = 5.0) -> ReportFiles:
    """Read, compute, write. With ``progress``, each step and the Spark stages running
    (every ``progress_every`` seconds) are printed to ``stream`` (stderr). The paths are
    checked first (``preflight``): a missing input or an unwritable output fails before
    any row is read."""
    from django_delayq.spark import source, summary  # lazy: pyspark, once the paths are checked

    if _bad_bucket(bucket_seconds):
        raise ValueError("bucket_seconds must be an int > 0, or None (chosen from the data's "
                         "span), not %r" % (bucket_seconds,))
    check_paths(out, None if jdbc_url else input)
    with StageProgress(spark, stream, enabled=progress, every=progress_every) as steps:
        with steps.step("reading jobs from %s" % (jdbc_url.split("?")[0] if jdbc_url
                                                  else input)):
            files = None if jdbc_url or input is None else source.inventory(spark, input)
            jobs = source.read_jobs(spark, input, jdbc_url=jdbc_url,
                                    jdbc_table=jdbc_table or source.DEFAULT_TABLE,
                                    jdbc_properties=jdbc_properties, files=files)
            attempts = source.read_attempts(
                spark, input, jdbc_url=jdbc_url,
                jdbc_table=jdbc_attempts_table or source.DEFAULT_ATTEMPT_TABLE,
                jdbc_properties=jdbc_properties, files=files)
        unrecorded = None if files is None or files.unrecorded is None \
            else len(files.unrecorded)
        if unrecorded:
            steps.write("%d Parquet files under %s not read: no record says delayq_export or "
                        "delayq_prune wrote them" % (unrecorded, input))
        if attempts is None:
            steps.write("%s does not hold the attempt rows of its jobs (an export begun "
                        "before delayq_export wrote them): no failed-attempt figure" % input)
        report = summary.compute_report(jobs, attempts=attempts, bucket_seconds=bucket_seconds,
                                progress=steps)
        report["source"] = jdbc_url.split("?")[0] if jdbc_url else str(input)
        report["unrecorded_files"] = unrecorded
        with steps.step("writing JSON, CSV, charts and HTML to %s" % out):
            return write_outputs(report, out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options shared by ``manage.py delayq_report`` and ``spark-submit report.py``."""
    parser.add_argument("--input", help="Export directory (from delayq_export / delayq_prune).")
    parser.add_argument("--out", required=True, help="Directory for the report files.")
    parser.add_argument("--master", default=None,
                        help="Spark master: local[*] (default), spark://host:7077, yarn...")
    parser.add_argument("--jdbc-url", help="Read the audit table over JDBC instead, e.g. "
                                           "jdbc:postgresql://host:5432/db")
    parser.add_argument("--jdbc-jar", help="Path of the JDBC driver jar.")
    parser.add_argument("--jdbc-driver", default=None,
                        help="JDBC driver class (default: the one of the URL's database: "
                             "org.postgresql.Driver, com.mysql.cj.jdbc.Driver, "
                             "org.mariadb.jdbc.Driver, org.sqlite.JDBC).")
    parser.add_argument("--jdbc-table", default=None, help="Audit table (django_delayq_job).")
    parser.add_argument("--jdbc-attempts-table", default=None,
                        help="Attempt table (django_delayq_jobattempt).")
    parser.add_argument("--jdbc-user", default=None)
    parser.add_argument("--jdbc-password", default=None)
    parser.add_argument("--bucket-seconds", type=int, default=None,
                        help="Time-series bucket (default: chosen from the data's span).")


def _bad_bucket(seconds: object) -> bool:
    return seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)
                                    or seconds <= 0)


def check_arguments(opts: Mapping[str, Any], *, local_jar: bool = True) -> str | None:
    """The options' problem, in one line, or None. With ``local_jar``, ``--jdbc-jar``
    must be a file on this machine (else Spark starts, then dies in a Py4J traceback);
    not under ``spark-submit``, whose driver may run on a node ``--jars`` shipped it to."""
    jar = opts.get("jdbc_jar")
    if not opts.get("input") and not opts.get("jdbc_url"):
        return "give --input DIR (a delayq_export directory) or --jdbc-url"
    if opts.get("jdbc_url") and not jar:
        return "--jdbc-url needs --jdbc-jar (the driver jar, e.g. postgresql-42.x.jar)"
    if jar and local_jar and not is_url(jar) and not Path(jar).is_file():
        return "--jdbc-jar %s is not a file (give the driver jar, e.g. postgresql-42.x.jar)" \
            % jar
    if _bad_bucket(opts.get("bucket_seconds")):
        return ("--bucket-seconds must be > 0, not %s (leave it out to have one chosen from "
                "the data's span)" % opts["bucket_seconds"])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="delayq report on Spark")
    add_arguments(parser)
    opts = vars(parser.parse_args(argv))
    if problem := check_arguments(opts, local_jar=False):
        parser.error(problem)
    try:  # before Spark starts: seconds to start, minutes to compute
        check_paths(opts["out"], None if opts["jdbc_url"] else opts["input"])
    except (FileNotFoundError, ValueError) as exc:
        parser.exit(2, "delayq report: %s\n" % exc)
    spark = build_session(opts["master"], app_name="delayq-report", jars=[opts["jdbc_jar"] or ""])
    props = {"user": opts["jdbc_user"], "password": opts["jdbc_password"],
             "driver": opts["jdbc_driver"]}
    try:
        files = run_report(spark, opts["out"], input=opts["input"], jdbc_url=opts["jdbc_url"],
                           jdbc_table=opts["jdbc_table"],
                           jdbc_attempts_table=opts["jdbc_attempts_table"],
                           jdbc_properties=props,
                           bucket_seconds=opts["bucket_seconds"], progress=True)
    except (FileNotFoundError, ValueError) as exc:
        parser.exit(2, "delayq report: %s\n" % exc)
    print("report: %s" % files.html)
    return 0


if __name__ == "__main__":  # spark-submit report.py ...
    raise SystemExit(main())
