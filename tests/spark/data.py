"""Generated audit data with known answers.

Queue ``default``, callable ``tests.jobs.add``: 100 jobs, job i (1..100) due at
BASE + i s, started i ms late, ran 10*i ms. Jobs 1-90 succeeded (1-80 first time,
81-90 on attempt 2); 91-100 died after 3 attempts with ``builtins.ValueError`` ("bad
input for order <i>").
Queue ``emails``, callable ``tests.jobs.noop``: 8 jobs started 1000 ms late that
ran 5 ms and succeeded, 2 cancelled before they started, 1 still scheduled (for
tomorrow). Every job was created 5 minutes before BASE + i s (the live one: i = 11).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

BASE = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
ADD = "tests.jobs.add"
NOOP = "tests.jobs.noop"


def _job(job_id: str, queue: str, fn: str, status: str, run_at: datetime,
         late_ms: float | None, run_ms: float | None, attempts: int,
         error: str = "", error_type: str = "") -> dict[str, Any]:
    started = None if late_ms is None else run_at + timedelta(milliseconds=late_ms)
    finished = None if started is None or run_ms is None else started + timedelta(
        milliseconds=run_ms)
    if status == "cancelled":
        finished = run_at
    return {"id": job_id, "queue": queue, "callable_path": fn, "status": status,
            "attempts": attempts, "max_attempts": 3, "last_error": error,
            "error_type": error_type,
            "run_at": run_at, "created_at": run_at - timedelta(minutes=5),
            "updated_at": finished or run_at, "started_at": started, "finished_at": finished,
            "args": [1, 2], "kwargs": {}}


def known_jobs() -> list[dict[str, Any]]:
    jobs = []
    for i in range(1, 101):
        status = "succeeded" if i <= 90 else "dead"
        attempts = 1 if i <= 80 else (2 if i <= 90 else 3)
        error = "bad input for order %d" % i if status == "dead" else ""
        kind = "builtins.ValueError" if status == "dead" else ""
        jobs.append(_job("a%03d" % i, "default", ADD, status, BASE + timedelta(seconds=i),
                         float(i), 10.0 * i, attempts, error, kind))
    jobs += [_job("e%03d" % i, "emails", NOOP, "succeeded", BASE + timedelta(seconds=i),
                  1000.0, 5.0, 1) for i in range(1, 9)]
    jobs += [_job("e%03d" % i, "emails", NOOP, "cancelled", BASE + timedelta(seconds=i),
                  None, None, 0) for i in range(9, 11)]
    jobs.append(_job("e011", "emails", NOOP, "scheduled", BASE + timedelta(days=1),
                     None, None, 0))
    jobs[-1]["created_at"] = BASE - timedelta(minutes=5) + timedelta(seconds=11)
    return jobs


def save_jobs(jobs: list[dict[str, Any]]) -> None:
    """Write the generated jobs as audit rows (the real model, the test database)."""
    from django_delayq.models import Job

    Job.objects.bulk_create([Job(**job) for job in jobs])
