"""The dashboard's last minutes from the audit rows: jobs finished per minute and the
lateness (start minus due time) of the attempts started in each minute, p50 and p95.

Both queries go through the ``(status, run_at)`` index and are bounded in time: rows of
the finishing statuses due between ``WINDOW + DUE_LOOKBACK`` ago and now. A job that
started more than ``DUE_LOOKBACK`` after its due time is therefore left out of the
charts (a backlog that late shows on the queues page and in the lateness metric). The
finished counts are grouped in the database; the lateness samples are read newest due
first, at most ``SAMPLE_CAP`` rows (``sampled`` says when the cap was reached).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count
from django.db.models.functions import TruncMinute

from django_delayq.models import Job, JobStatus

WINDOW_MINUTES = 15
DUE_LOOKBACK = timedelta(hours=1)
SAMPLE_CAP = 20_000
FINISHED = (JobStatus.SUCCEEDED, JobStatus.DEAD)
STARTED = (JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.DEAD)


def _floor(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of an ascending list; None when it is empty."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * fraction // 1))
    return sorted_values[int(rank) - 1]


def _due_window(now: datetime, since: datetime) -> dict[str, datetime]:
    return {"run_at__gte": since - DUE_LOOKBACK, "run_at__lte": now}


def _finished_per_minute(now: datetime, since: datetime) -> dict[datetime, int]:
    rows = (Job.objects.filter(status__in=FINISHED, finished_at__gte=since,
                               **_due_window(now, since))
            .annotate(minute=TruncMinute("finished_at")).values("minute")
            .annotate(n=Count("pk")).order_by())
    return {_floor(row["minute"]): row["n"] for row in rows}


def _lateness_per_minute(now: datetime, since: datetime) -> tuple[dict[datetime, list[float]],
                                                                     bool]:
    rows = list(Job.objects.filter(status__in=STARTED, started_at__gte=since,
                                   **_due_window(now, since))
                .order_by("-run_at").values_list("run_at", "started_at")[:SAMPLE_CAP + 1])
    by_minute: dict[datetime, list[float]] = {}
    for run_at, started_at in rows[:SAMPLE_CAP]:
        if started_at is None:  # excluded by the filter; for the type checker
            continue
        ms = max(0.0, (started_at - run_at).total_seconds() * 1000)
        by_minute.setdefault(_floor(started_at), []).append(ms)
    return by_minute, len(rows) > SAMPLE_CAP


def last_minutes(now: datetime) -> dict[str, Any]:
    """The ``WINDOW_MINUTES`` minutes up to ``now`` (the current one last, partial), as
    the dashboard's JSON gives them (``minutes``: each one's start in epoch ms), and
    whether the lateness samples were capped (``sampled``)."""
    first = _floor(now) - timedelta(minutes=WINDOW_MINUTES - 1)
    finished = _finished_per_minute(now, first)
    lateness, sampled = _lateness_per_minute(now, first)
    minutes = []
    for start in (first + timedelta(minutes=i) for i in range(WINDOW_MINUTES)):
        values = sorted(lateness.get(start, []))
        minutes.append({"start_ms": int(start.timestamp() * 1000),
                        "finished": finished.get(start, 0), "started": len(values),
                        "p50_ms": percentile(values, 0.5), "p95_ms": percentile(values, 0.95)})
    return {"minutes": minutes, "sampled": sampled}
