"""The report's figures computed in plain pandas from audit rows (``Job.objects.values``)
and attempt rows (``JobAttempt.objects.values``), straight from the definitions in
docs/pipeline.md, sharing no code with the report.

``figures(rows, attempts)`` returns, per (queue, callable) level (the callable, its queue
as ``(queue, "*")``, everything as ``("*", "*")``), the figures the report's groups hold;
``series(rows, seconds)`` the per-queue buckets of finished jobs.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

STATUSES = ("waiting", "scheduled", "running", "retrying", "succeeded", "dead", "cancelled",
            "expired")
FINAL = ("succeeded", "dead", "cancelled", "expired")


def _r(value: float) -> float:
    return round(float(value), 3)


def _dist(values: pd.Series) -> dict[str, float | None]:
    if values.empty:
        return {"p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    p50, p95, p99 = np.percentile(values.to_numpy(), [50, 95, 99])  # linear, numpy's default
    return {"p50": _r(p50), "p95": _r(p95), "p99": _r(p99), "max": _r(values.max()),
            "mean": _r(values.mean())}


def _ms(later: pd.Series, earlier: pd.Series) -> pd.Series:
    return (later - earlier).dt.total_seconds() * 1000


def _throughput(df: pd.DataFrame) -> dict[str, Any]:
    done = df[df.status.isin(FINAL) & df.finished_at.notna()]
    if done.empty:
        return {"finished": 0, "per_min_mean": 0.0, "per_min_peak": 0}
    minutes = done.finished_at.dt.floor("min")
    spanned = (minutes.max() - minutes.min()) // pd.Timedelta(minutes=1) + 1  # both whole
    peak = minutes.value_counts().max()
    return {"finished": len(done), "per_min_mean": _r(len(done) / spanned),
            "per_min_peak": int(peak)}


def _first_lines(messages: pd.Series) -> list[str]:
    return [m.split("\n")[0][:200] for m in messages]


def _errors(df: pd.DataFrame, attempts: pd.DataFrame | None,
            top: int = 5) -> list[dict[str, Any]]:
    """A job's error: its ``error_type``, unless empty or the job expired; an attempt's:
    its ``error_type``, unless empty. ``failed_attempts``: the attempt rows of this
    level's jobs with that type (None without attempt rows)."""
    kinds: dict[str, dict[str, Any]] = {}
    failed = df[(df.error_type != "") & (df.status != "expired")]
    for kind, rows in failed.groupby("error_type"):
        kinds[str(kind)] = {"failed_attempts": 0, "failed_jobs": len(rows),
                            "dead_jobs": int((rows.status == "dead").sum()),
                            "lines": _first_lines(rows.last_error)}
    if attempts is not None:
        tried = attempts[attempts.job_id.isin(df.id) & (attempts.error_type != "")]
        for kind, rows in tried.groupby("error_type"):
            entry = kinds.setdefault(str(kind), {"failed_attempts": 0, "failed_jobs": 0,
                                                 "dead_jobs": 0, "lines": []})
            entry["failed_attempts"] = len(rows)
            entry["lines"] += _first_lines(rows.error)
    out = [{"error": kind, "failed_attempts": None if attempts is None else e["failed_attempts"],
            "dead_jobs": e["dead_jobs"], "failed_jobs": e["failed_jobs"],
            "example": min(e["lines"])} for kind, e in kinds.items()]
    out.sort(key=lambda e: (-(e["failed_attempts"] or 0), -e["failed_jobs"], -e["dead_jobs"],
                            e["error"]))
    return out[:top]


def _group(df: pd.DataFrame, attempts: pd.DataFrame | None) -> dict[str, Any]:
    status = {s: int((df.status == s).sum()) for s in STATUSES}
    decided = status["succeeded"] + status["dead"]
    measured = df[df.status.isin(("running", "succeeded", "dead")) & df.started_at.notna()]
    ran = df[df.status.isin(("succeeded", "dead", "cancelled")) & df.started_at.notna()
             & df.finished_at.notna()]
    return {
        "jobs": len(df), "status": status,
        "success_rate": _r(status["succeeded"] / decided) if decided else None,
        "lateness_ms": _dist(_ms(measured.started_at, measured.run_at)),
        "duration_ms": _dist(_ms(ran.finished_at, ran.started_at)),
        "throughput": _throughput(df),
        "attempts": {str(k): v for k, v in sorted(Counter(
            df[df.status.isin(FINAL)].attempts).items())},
        "top_errors": _errors(df, attempts),
    }


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for column in ("run_at", "started_at", "finished_at"):
        df[column] = pd.to_datetime(df[column], utc=True)
    return df


def figures(rows: list[dict[str, Any]], attempts: list[dict[str, Any]] | None = None
            ) -> dict[tuple[str, str], dict[str, Any]]:
    """``attempts``: the attempt rows (``JobAttempt.objects.values``), or None for data
    without them."""
    df = _frame(rows)
    tried = None if attempts is None else pd.DataFrame(
        attempts, columns=["id", "job_id", "error_type", "error"])
    out = {("*", "*"): _group(df, tried)}
    for queue, part in df.groupby("queue"):
        out[(str(queue), "*")] = _group(part, tried)
        for fn, rows_of in part.groupby("callable_path"):
            out[(str(queue), str(fn))] = _group(rows_of, tried)
    return out


def series(rows: list[dict[str, Any]], seconds: int) -> dict[tuple[str, str], dict[str, int]]:
    """Per (queue or "*", bucket start as ISO text): finished jobs, each final status, and
    retried ones (attempts > 1), by finish time; buckets with nothing finished left out."""
    df = _frame(rows)
    done = df[df.status.isin(FINAL) & df.finished_at.notna()].copy()
    epoch = done.finished_at.map(lambda t: t.timestamp())
    done["bucket"] = epoch.map(lambda s: math.floor(s / seconds) * seconds)
    out: dict[tuple[str, str], dict[str, int]] = {}
    for queue, part in [("*", done), *done.groupby("queue")]:
        for bucket, rows_of in part.groupby("bucket"):
            key = (str(queue), pd.Timestamp(bucket, unit="s", tz="UTC").isoformat())
            counts = {s: int((rows_of.status == s).sum()) for s in FINAL}
            out[key] = {"finished": len(rows_of), "retried": int((rows_of.attempts > 1).sum()),
                        **counts}
    return out
