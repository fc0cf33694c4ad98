"""One self-contained HTML page: summary tables, top errors, charts inlined as base64."""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path
from typing import Any

from django_delayq.spark.constants import PERCENTILE_NAMES, STATUSES

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td.l{text-align:left}tr.total{font-weight:bold}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}
td.c{max-width:22em;overflow-wrap:anywhere}"""
MAX_COLUMNS = 12


def _cell(value: Any, left: bool = False) -> str:
    text = "" if value is None else ("%.3f" % value if isinstance(value, float) else str(value))
    return '<td class="l">%s</td>' % escape(text) if left else "<td>%s</td>" % escape(text)


def _table(head: list[str], rows: list[str]) -> str:
    header = "".join("<th>%s</th>" % escape(h) for h in head)
    return "<table><tr>%s</tr>%s</table>" % (header, "".join(rows))


def _row(g: dict[str, Any], cells: list[str]) -> str:
    css = ' class="total"' if g["callable"] == "*" else ""
    names = [_cell(g["queue"], True), '<td class="l c">%s</td>' % escape(g["callable"])]
    return "<tr%s>%s</tr>" % (css, "".join(names + cells))


def _summary_tables(groups: list[dict[str, Any]]) -> str:
    """Two tables of at most MAX_COLUMNS columns (outcomes; timing), so neither needs
    sideways scrolling on a laptop screen; long callable paths wrap."""
    outcomes = [_row(g, [_cell(g["jobs"]), *[_cell(g["status"][s]) for s in STATUSES],
                         _cell(g["success_rate"])]) for g in groups]
    timing = []
    for g in groups:
        cells = [_cell(g[dist][p]) for dist in ("lateness_ms", "duration_ms")
                 for p in (*PERCENTILE_NAMES, "max")]
        timing.append(_row(g, cells + [_cell(g["throughput"]["per_min_mean"]),
                                       _cell(g["throughput"]["per_min_peak"])]))
    late = ["late %s" % p for p in (*PERCENTILE_NAMES, "max")]
    run = ["run %s" % p for p in (*PERCENTILE_NAMES, "max")]
    return (_table(["queue", "callable", "jobs", *STATUSES, "success"], outcomes)
            + _table(["queue", "callable", *late, *run, "/min mean", "/min peak"], timing))


ERRORS_NOTE = """<p>Per exception type: <b>failed attempts</b>, the attempts that raised it,
whether their job later succeeded, is still retrying, was cancelled or died (a job that
failed three times counts three); <b>dead jobs</b>, the jobs that ended dead with it; and
<b>failed jobs</b>, the jobs whose last failure it was (an audit row keeps its last failure
only: a job that failed three times counts once). Expired jobs are in the <i>expired</i>
column above, not here: an expiry is not an exception.</p>"""
NO_ATTEMPTS = """<p><b>Failed attempts: unavailable.</b> This data does not hold the attempt
rows of its jobs (an export directory begun before <code>delayq_export</code> wrote them;
export to a new directory to have them), so that column says n/a. <b>Failed jobs</b>
counts jobs, not attempts: a job that failed three times counts once.</p>"""
UNAVAILABLE = "n/a"


def _not_counted(report: dict[str, Any]) -> str:
    """Attempt rows the error figures leave out, said rather than dropped."""
    if orphans := report.get("attempts_without_job"):
        return ("<p><b>%d attempt rows not counted:</b> their job is not in this data "
                "(<code>attempts_without_job</code>).</p>" % orphans)
    return ""


def _not_read(report: dict[str, Any]) -> str:
    """Files of the input the report left out, said rather than dropped."""
    if unrecorded := report.get("unrecorded_files"):
        return ("<p><b>%d Parquet files not read:</b> no record says <code>delayq_export"
                "</code> or <code>delayq_prune</code> wrote them (<code>unrecorded_files"
                "</code>).</p>" % unrecorded)
    return ""


def _errors_table(report: dict[str, Any]) -> str:
    available = report.get("failed_attempts_available", False)
    rows = ["<tr>%s</tr>" % "".join([
        _cell(g["queue"], True), _cell(g["callable"], True),
        _cell(e["failed_attempts"] if available else UNAVAILABLE), _cell(e["dead_jobs"]),
        _cell(e["failed_jobs"]), _cell(e["error"], True), _cell(e.get("example"), True)])
        for g in report["groups"] if g["callable"] != "*" for e in g["top_errors"]]
    if not rows:
        return "<p>No errors.</p>" + ("" if available else NO_ATTEMPTS) + _not_counted(report)
    head = ["queue", "callable", "failed attempts", "dead jobs", "failed jobs", "error type",
            "example message"]
    note = ERRORS_NOTE if available else ERRORS_NOTE + NO_ATTEMPTS
    return note + _not_counted(report) + _table(head, rows)


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return '<img alt="%s" src="data:image/png;base64,%s">' % (escape(alt), data)


def render(report: dict[str, Any], charts: dict[str, Path]) -> str:
    images = "".join("<h3>%s</h3>%s" % (escape(name), _img(path, name))
                     for name, path in charts.items())
    return """<!doctype html><html><head><meta charset="utf-8">
<title>delayq report</title><style>%s</style></head><body>
<h1>delayq report</h1>
<p>%d jobs; generated %s; time buckets of %d s.
Lateness = start &minus; due time of the same attempt, run = finish &minus; start,
in milliseconds (exact percentiles). Success = succeeded / (succeeded + dead): cancelled
and expired jobs are neither; finished jobs (throughput) are the succeeded, dead,
cancelled and expired ones.</p>%s
<h2>Per queue and callable</h2>%s<h2>Charts</h2>%s<h2>Most frequent errors</h2>%s
</body></html>""" % (STYLE, report["jobs"], escape(report["generated_at"]),
                     report["bucket_seconds"], _not_read(report),
                     _summary_tables(report["groups"]), images, _errors_table(report))
