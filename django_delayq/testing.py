"""Helpers for users' own test suites.

* ``run_due_jobs()``: run every job that is due now, synchronously, in this process
  (a burst worker with one thread), and return how many ran.
* ``run_eager(job_id)``: run one job inline right away (used by ``DELAYQ["EAGER"]``).
"""

from __future__ import annotations

from django_delayq import execution
from django_delayq.conf import get_settings
from django_delayq.connection import get_engine
from django_delayq.context import JobContext
from django_delayq.models import Job, JobStatus


def run_due_jobs(queues: list[str] | None = None) -> int:
    """Run every job due now on ``queues`` (default: all) in this process; return the count."""
    from django_delayq.worker import Worker, WorkerOptions

    settings = get_settings()
    worker = Worker(get_engine(), settings, WorkerOptions(
        queues=tuple(queues or settings.queues), concurrency=1, burst=True))
    worker.run()
    return worker.claimed_total


def run_eager(job_id: str) -> None:
    """Run job ``job_id`` now, in this thread, and record the outcome on its row."""
    from django.utils import timezone

    job = Job.objects.get(pk=job_id)
    started = timezone.now()
    ctx = JobContext(id=job.id, queue=job.queue, attempt=1, max_attempts=job.max_attempts,
                     due_at=job.run_at, worker_id="eager")
    try:
        result = execution.run(job.callable_path, job.args, job.kwargs, ctx)
    except Exception as exc:
        Job.objects.filter(pk=job_id).update(
            status=JobStatus.DEAD, attempts=1, started_at=started, finished_at=timezone.now(),
            last_error="%s: %s" % (type(exc).__name__, exc), worker_id="eager")
        raise
    Job.objects.filter(pk=job_id).update(
        status=JobStatus.SUCCEEDED, attempts=1, started_at=started, finished_at=timezone.now(),
        result=result if isinstance(result, (str, int, float, bool, list, dict)) else None,
        worker_id="eager")
