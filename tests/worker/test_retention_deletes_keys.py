"""Retention deletes the ``JobKey`` row a deleted job holds (``on_conflict`` keys), and
the key works as before afterwards: the next call of that key takes it again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.models import Job, JobKey, JobStatus
from django_delayq.worker.retention import delete_batch

pytestmark = pytest.mark.django_db(transaction=True)


def _ended_long_ago(*ids: str) -> None:
    when = timezone.now() - timedelta(days=40)
    Job.objects.filter(pk__in=ids).update(status=JobStatus.SUCCEEDED, run_at=when,
                                          finished_at=when)


def test_retention_deletes_the_key_rows_of_deleted_jobs(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    old = schedule("tests.jobs.noop", 1, key="report-7", on_conflict="drop", delay=3600).id
    other = schedule("tests.jobs.noop", 2, key="report-8", on_conflict="drop", delay=3600).id
    assert set(JobKey.objects.values_list("job_id", flat=True)) == {old, other}
    _ended_long_ago(old)
    assert delete_batch("succeeded", 7) == (1, 0)
    assert list(JobKey.objects.values_list("key", "job_id")) == [("report-8", other)]
    again = schedule("tests.jobs.noop", 3, key="report-7", on_conflict="drop", delay=3600).id
    assert again != old
    assert JobKey.objects.get(key="report-7").job_id == again
    # The live holder of "report-8" still drops a second call.
    assert schedule("tests.jobs.noop", 4, key="report-8", on_conflict="drop").id == other
