"""delayq_prune: archive finished rows (and their attempts) to Parquet, then delete them."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pyarrow.dataset as ds
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_delayq.models import Job, JobAttempt
from django_delayq.spark.prune import parse_age, prune_jobs
from tests.spark.data import known_jobs, save_jobs

pytestmark = pytest.mark.django_db


def _age_jobs(days: int) -> None:
    old = timezone.now() - timedelta(days=days)
    Job.objects.filter(finished_at__isnull=False).update(finished_at=old)


def test_parse_age() -> None:
    assert parse_age("30d") == timedelta(days=30)
    assert parse_age("90m") == timedelta(minutes=90)
    with pytest.raises(ValueError, match="30d"):
        parse_age("30 days")


def test_prune_archives_then_deletes_finished_rows_in_batches(tmp_path: Any) -> None:
    save_jobs(known_jobs())
    _age_jobs(40)
    Job.objects.filter(pk="a002").update(finished_at=timezone.now())  # too recent
    JobAttempt.objects.create(job_id="a091", number=1, outcome="retrying", error="first")
    JobAttempt.objects.create(job_id="a091", number=2, outcome="retrying", error="second")
    result = prune_jobs(timedelta(days=30), archive=tmp_path, batch_size=25, progress=False)
    # finished: 100 default + 8 + 2 cancelled emails; minus the recent one
    assert result.jobs == 109 and result.attempts == 2
    assert sorted(Job.objects.values_list("pk", flat=True)) == ["a002", "e011"]
    assert not JobAttempt.objects.exists()
    jobs = ds.dataset(tmp_path / "jobs", format="parquet", partitioning="hive").to_table()
    assert jobs.num_rows == 109
    fields = {f.attname for f in Job._meta.concrete_fields}
    assert set(jobs.column_names) == fields | {"read_at", "day"}  # every column of the row
    attempts = ds.dataset(tmp_path / "attempts", format="parquet",
                          partitioning="hive").to_table()
    assert sorted(attempts.column("error").to_pylist()) == ["first", "second"]


def test_command_dry_run_and_bad_age() -> None:
    save_jobs(known_jobs())
    _age_jobs(40)
    out = io.StringIO()
    call_command("delayq_prune", "--older-than", "30d", "--dry-run", stdout=out)
    assert "would delete 110 jobs" in out.getvalue()
    assert Job.objects.count() == 111
    call_command("delayq_prune", "--older-than", "30d", stdout=out, stderr=io.StringIO())
    assert list(Job.objects.values_list("pk", flat=True)) == ["e011"]
    with pytest.raises(CommandError, match="--older-than"):
        call_command("delayq_prune", "--older-than", "soon")
