"""PNG charts of a report (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import math
import re
import textwrap
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

MAX_QUEUES = 6
LABEL_WIDTH = 34  # characters per line of an error label; long labels wrap, never cut


def _plt() -> Any:
    import matplotlib  # lazy: the Spark extra, only to draw

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # lazy: after use("Agg")

    return plt


def _by_queue(series: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per-queue points, the busiest queues first; the overall line only if one queue."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for point in series:
        out[point["queue"]].append(point)
    named = [q for q in out if q != "*"]
    named.sort(key=lambda q: -sum(p["finished"] + p["started"] for p in out[q]))
    keep = named[:MAX_QUEUES] or ["*"]
    return {q: sorted(out[q], key=lambda p: p["bucket"]) for q in keep}


def _x(points: list[dict[str, Any]]) -> list[datetime]:
    return [datetime.fromisoformat(p["bucket"]) for p in points]


def _finish(fig: Any, ax: Any, title: str, ylabel: str, path: Path) -> Path:
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("time (UTC)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _plt().close(fig)
    return path


def _lateness(points: list[dict[str, Any]], p: str) -> list[float]:
    """Lateness percentile ``p`` per bucket; NaN where nothing started, so the line breaks
    there instead of running straight across the empty minutes (no job, no lateness)."""
    return [pt["lateness_ms"][p] if pt["lateness_ms"] else math.nan for pt in points]


def draw_lateness(ax: Any, report: dict[str, Any]) -> None:
    for queue, points in _by_queue(report["series"]).items():
        line, = ax.plot(_x(points), _lateness(points, "p50"), marker=".", label=queue + " p50")
        ax.plot(_x(points), _lateness(points, "p95"), linestyle="--", marker=".",
                color=line.get_color(), label=queue + " p95")


def draw_throughput(ax: Any, report: dict[str, Any]) -> None:
    """Finished jobs per minute in every bucket: an empty bucket is a zero (the series has
    every bucket from the first to the last, ``summary._every_bucket``)."""
    minutes = report["bucket_seconds"] / 60.0
    for queue, points in _by_queue(report["series"]).items():
        ax.plot(_x(points), [p["finished"] / minutes for p in points], label=queue)


def lateness_chart(report: dict[str, Any], path: Path) -> Path:
    fig, ax = _plt().subplots(figsize=(9, 4))
    draw_lateness(ax, report)
    return _finish(fig, ax, "Lateness (start - due)", "ms", path)


def throughput_chart(report: dict[str, Any], path: Path) -> Path:
    fig, ax = _plt().subplots(figsize=(9, 4))
    draw_throughput(ax, report)
    return _finish(fig, ax, "Throughput (finished jobs)", "jobs / minute", path)


def failures_chart(report: dict[str, Any], path: Path) -> Path:
    fig, (ax, bars) = _plt().subplots(1, 2, figsize=(12, 4), width_ratios=[3, 2])
    draw_failures(ax, bars, report)
    return _finish(fig, ax, "Failures per bucket", "jobs", path)


def draw_failures(ax: Any, bars: Any, report: dict[str, Any]) -> None:
    """Per queue and bucket: jobs that ended dead or expired, and retried jobs that
    finished; beside it, the most frequent error types overall."""
    for queue, points in _by_queue(report["series"]).items():
        line, = ax.plot(_x(points), [p["dead"] for p in points], label=queue + " dead")
        ax.plot(_x(points), [p["expired"] for p in points], linestyle="-.",
                color=line.get_color(), label=queue + " expired")
        ax.plot(_x(points), [p["retried"] for p in points], linestyle=":",
                color=line.get_color(), label=queue + " retried")
    overall = next((g for g in report["groups"] if g["queue"] == "*"), None)
    errors = (overall or {}).get("top_errors", [])[::-1]
    error_bars(bars, errors, attempts=report.get("failed_attempts_available", False))
    bars.tick_params(axis="y", labelsize="small")


def error_bars(ax: Any, errors: list[dict[str, Any]], attempts: bool = True) -> Any:
    """Two bars per error type at its own position, labelled apart (bars keyed by label
    text would merge two errors whose labels look alike): its failed attempts (light; the
    jobs whose last failure it was when the data has no attempt rows, and the legend
    says so) and the jobs that ended dead with it (dark). Returns the first."""
    rows = range(len(errors))
    if attempts:
        light = [e["failed_attempts"] for e in errors]
        label = "failed attempts"
    else:
        light = [e["failed_jobs"] for e in errors]
        label = "jobs whose last failure it was\n(attempt rows not in this data)"
    container = ax.barh([r + 0.2 for r in rows], light, height=0.4, color="#f1a9a0",
                        label=label)
    ax.barh([r - 0.2 for r in rows], [e["dead_jobs"] for e in errors], height=0.4,
            color="#c0392b", label="jobs that ended dead")
    ax.set_yticks(rows, [error_label(e["error"]) for e in errors])
    ax.set_title("Most frequent errors (exception type)")
    if errors:
        ax.legend(fontsize="small")
    return container


def error_label(text: str) -> str:
    """The whole label, wrapped after dots and spaces (class paths) to LABEL_WIDTH columns;
    a part longer than a line is split. Nothing is cut off."""
    parts = re.findall(r"[^. ]*[. ]?", text)
    lines: list[str] = [""]
    for part in filter(None, parts):
        for piece in textwrap.wrap(part, LABEL_WIDTH, drop_whitespace=False) or [part]:
            if lines[-1] and len(lines[-1]) + len(piece) > LABEL_WIDTH:
                lines.append("")
            lines[-1] += piece
    return "\n".join(line.strip() for line in lines)


def write_charts(report: dict[str, Any], out: Path) -> dict[str, Path]:
    """The report's charts. Every label is plain text: a queue, callable or error type
    written into the database with ``$...$`` is no math to parse (a bad formula raised)."""
    with _plt().rc_context({"text.parse_math": False}):
        return {"lateness": lateness_chart(report, out / "lateness.png"),
                "throughput": throughput_chart(report, out / "throughput.png"),
                "failures": failures_chart(report, out / "failures.png")}
