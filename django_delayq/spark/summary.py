"""``compute_report``: run the Spark aggregations and assemble one plain, JSON-ready dict."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django_delayq.spark import figures
from django_delayq.spark.constants import FINAL, PERCENTILE_NAMES, STATUSES, TOP_ERRORS
from django_delayq.spark.stages import StageProgress

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row


def _r(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


def _utc_us(us: int | None) -> str | None:
    if us is None:
        return None
    return datetime.fromtimestamp(us / 1e6, tz=UTC).isoformat()


def _dist(row: Row, name: str) -> dict[str, float | None]:
    values = row[name + "_p"] or [None] * len(PERCENTILE_NAMES)
    out = {p: _r(v) for p, v in zip(PERCENTILE_NAMES, values)}
    out["max"] = _r(row[name + "_max"])
    out["mean"] = _r(row[name + "_mean"])
    return out


MINUTE_US = 60_000_000


def _throughput(row: Row, peak: int | None) -> dict[str, Any]:
    """The mean per wall-clock minute over every minute from the first finish's to the
    last finish's, both counted whole, empty ones too: the peak's minutes, so the mean
    is never above the peak (a span inside one minute is one minute)."""
    first, last, n = row["first_finished_us"], row["last_finished_us"], row["finished"] or 0
    minutes = 1 if first is None else last // MINUTE_US - first // MINUTE_US + 1
    return {"finished": n, "per_min_mean": _r(n / minutes) if n else 0.0,
            "per_min_peak": peak or 0, "first_finished": _utc_us(first),
            "last_finished": _utc_us(last)}


def _group(row: Row, peak: int | None) -> dict[str, Any]:
    counts = {s: row["n_" + s] or 0 for s in STATUSES}
    decided = counts["succeeded"] + counts["dead"]
    return {
        "queue": row["queue"], "callable": row["callable"], "jobs": row["jobs"],
        "status": counts,
        "success_rate": _r(counts["succeeded"] / decided) if decided else None,
        "lateness_ms": _dist(row, "lateness"), "duration_ms": _dist(row, "duration"),
        "throughput": _throughput(row, peak), "attempts": {}, "top_errors": [],
    }


def _every_bucket(points: dict[tuple[str, int], dict[str, Any]], seconds: int) -> None:
    """Add the empty buckets between each queue's first and last one: a minute with
    nothing started or finished is a zero on the charts, not a line drawn across it."""
    spans: dict[str, tuple[int, int]] = {}
    for queue, bucket in points:
        lo, hi = spans.get(queue, (bucket, bucket))
        spans[queue] = (min(lo, bucket), max(hi, bucket))
    for queue, (lo, hi) in spans.items():
        for bucket in range(lo, hi + seconds, seconds):
            points.setdefault((queue, bucket), {})


def _series(started: list[Any], finished: list[Any], seconds: int) -> list[dict[str, Any]]:
    points: dict[tuple[str, int], dict[str, Any]] = {}
    for row in started:
        point = points.setdefault((row["queue"], row["bucket"]), {})
        point["started"] = row["started"]
        point["lateness_ms"] = _dist(row, "lateness") if row["lateness_max"] is not None else None
    for row in finished:
        point = points.setdefault((row["queue"], row["bucket"]), {})
        point.update({k: row[k] for k in ("finished", "retried", *FINAL)})
    _every_bucket(points, seconds)
    out = []
    for (queue, bucket), point in sorted(points.items()):
        base = {"queue": queue, "bucket": _utc_us(bucket * 1_000_000), "started": 0,
                "lateness_ms": None, "finished": 0, "retried": 0, **dict.fromkeys(FINAL, 0)}
        out.append({**base, **point})
    return out


def _errors(lv: DataFrame, attempt_lv: DataFrame | None, top: int,
            groups: dict[tuple[str, str], dict[str, Any]]) -> None:
    for r in figures.errors_frame(lv, attempt_lv, top).orderBy("rank").collect():
        groups[(r["queue"], r["callable"])]["top_errors"].append(
            {"error": r["error"], "failed_attempts": r["failed_attempts"],
             "dead_jobs": r["dead_jobs"], "failed_jobs": r["failed_jobs"],
             "example": r["example"]})


def compute_report(jobs: DataFrame, *, attempts: DataFrame | None = None,
                   bucket_seconds: int | None = None, top_errors: int = TOP_ERRORS,
                   progress: StageProgress | None = None) -> dict[str, Any]:
    """``jobs``: one row per job (see ``source.read_jobs``); ``attempts``: one row per
    attempt (``source.read_attempts``), or None when the data has none (then every
    ``failed_attempts`` is null and ``failed_attempts_available`` false). Attempt rows
    whose job is not in ``jobs`` are counted in no error row, and in
    ``attempts_without_job`` (null without attempt rows). Returns the whole report;
    ``progress`` is told each step as it starts and ends."""
    steps = progress or StageProgress(None, enabled=False)
    jobs = jobs.cache()
    try:
        with steps.step("counting jobs"):
            rows = jobs.count()
            span = figures.time_span_seconds(jobs)
        bucket = bucket_seconds or figures.choose_bucket(span)
        lv = figures.with_levels(jobs)
        with steps.step("summary per queue and callable (%d jobs)" % rows):
            peaks = {(r["queue"], r["callable"]): r["peak"]
                     for r in figures.peak_frame(lv).collect()}
            groups = {(r["queue"], r["callable"]): _group(r, peaks.get((r["queue"],
                                                                       r["callable"])))
                      for r in figures.summary_frame(lv).collect()}
        with steps.step("attempts and errors"):
            for r in figures.attempts_frame(lv).collect():
                groups[(r["queue"], r["callable"])]["attempts"][str(r["attempts"])] = r["count"]
            _errors(lv, None if attempts is None else figures.attempt_levels(attempts, jobs),
                    top_errors, groups)
            orphans = None if attempts is None else figures.without_job(attempts, jobs)
        with steps.step("time series (%d s buckets)" % bucket):
            started, finished = figures.series_frames(lv, bucket)
            series = _series(started.collect(), finished.collect(), bucket)
    finally:
        jobs.unpersist()
    for group in groups.values():
        group["attempts"] = dict(sorted(group["attempts"].items(), key=lambda kv: int(kv[0])))
    ordered = sorted(groups.values(), key=lambda g: (g["queue"] != "*", g["queue"],
                                                     g["callable"] != "*", g["callable"]))
    if orphans:
        steps.write("%d attempt rows not counted: their job is not in the data" % orphans)
    return {"generated_at": datetime.now(UTC).isoformat(), "jobs": rows,
            "failed_attempts_available": attempts is not None,
            "attempts_without_job": orphans,
            "bucket_seconds": bucket, "groups": ordered, "series": series}
