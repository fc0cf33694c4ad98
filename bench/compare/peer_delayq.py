#!/usr/bin/env python
"""django-delayq in the comparison: the real ``manage.py delayq_worker`` subprocess,
audit rows ON (SQLite, WAL), ``schedule()`` / ``schedule_many()`` for enqueueing.

Runs in the project's virtualenv (the one ``make`` uses), not in the peers' one.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
ROOT = BENCH.parent
sys.path[:0] = [str(HERE), str(BENCH), str(ROOT)]

import common  # noqa: E402

JOB = "delayq_jobs.record"


def _at(due_ms: int) -> datetime:
    return datetime.fromtimestamp(due_ms / 1000, tz=UTC)


class DelayQ:
    name = "delayq"
    warmup_s = 2.0

    def setup(self, url: str, workdir: Path) -> None:
        os.environ.update(DELAYQ_REDIS_URL=url, BENCH_DIR=str(workdir), BENCH_DB="sqlite",
                          DJANGO_SETTINGS_MODULE="compare_settings",
                          PYTHONPATH=os.pathsep.join([str(HERE), str(BENCH), str(ROOT)]))
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        from django_delayq.models import Job, JobAttempt

        JobAttempt.objects.all().delete()
        Job.objects.all().delete()

    def describe(self, concurrency: int) -> dict[str, str]:
        from importlib.metadata import version

        import django
        from django.conf import settings

        d = settings.DELAYQ
        return {"version": "django-delayq %s (Django %s)" % (version("django-delayq"),
                                                            django.get_version()),
                "settings": "delayq_worker --concurrency %d (threads), CLAIM_BATCH %s, "
                            "AUDIT_BATCH %s, audit rows ON in SQLite (WAL)"
                            % (concurrency, d["CLAIM_BATCH"], d["AUDIT_BATCH"]),
                "one": "schedule(fn, due, at=...) in autocommit: audit row + Redis",
                "bulk": "schedule_many(fn, [JobSpec(at=...)]): executemany INSERT + 1 script/1000"}

    def enqueue_one(self, due_ms: list[int]) -> None:
        from django_delayq import schedule

        for due in due_ms:
            at = _at(due)
            schedule(JOB, int(at.timestamp() * 1000), at=at)

    def enqueue_bulk(self, due_ms: list[int]) -> bool:
        from django_delayq.core.api import JobSpec, schedule_many

        ats = [_at(due) for due in due_ms]
        schedule_many(JOB, [JobSpec(args=[int(at.timestamp() * 1000)], at=at) for at in ats])
        return True

    def enqueue_due(self, due_ms: list[int]) -> None:
        from django_delayq.core.api import JobSpec, schedule_many

        schedule_many(JOB, [JobSpec(args=[due]) for due in due_ms])

    def worker(self, concurrency: int) -> tuple[list[str], dict[str, str]]:
        if os.environ.get("BENCH_FRESH_REDIS") != "1":
            self._epoch()
        return ([sys.executable, "-m", "django", "delayq_worker", "-v", "0",
                 "--concurrency", str(concurrency)], {})

    def _epoch(self) -> None:
        """Steady state: the queue's epoch key exists, as it does once any worker has run.

        run.py flushes Redis before each phase; without an epoch the new worker takes that
        for data loss and runs a full reconcile pass without grace in its main thread
        (BENCH_FRESH_REDIS=1 measures that case).
        """
        from django_delayq.core.conf import get_settings
        from django_delayq.core.connection import get_engine
        from django_delayq.core.reconcile import Reconciler

        s = get_settings()
        Reconciler(get_engine(), s, tuple(s.queues)).check_epochs()

    def after(self, phase: str, result: dict[str, Any]) -> None:
        """Audit rows are part of the job: count the rows that say succeeded."""
        if phase not in ("drain", "lateness"):
            return
        from django_delayq.models import Job

        expected = result.get(phase + "_expected", 0)
        deadline = time.monotonic() + 10
        while (done := Job.objects.filter(status="succeeded").count()) < expected:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        result[phase + "_audit_rows_succeeded"] = done


if __name__ == "__main__":
    sys.exit(common.main(DelayQ()))
