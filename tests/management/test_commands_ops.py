"""The operator's commands answer bad input with one clear line and exit 2, and count right."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_delayq.models import Job, JobAttempt, JobStatus

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("pyarrow")


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "django", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("option", ["--since", "--until"])
def test_export_with_a_date_it_cannot_read_names_it_and_exits_2(tmp_path: Path,
                                                                option: str) -> None:
    proc = manage("delayq_export", "--out", str(tmp_path), option, "yesterday")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "'yesterday'" in proc.stderr and option in proc.stderr
    assert "2025-01-31" in proc.stderr and "2025-01-31T12:00:00+00:00" in proc.stderr


def test_export_bad_date_through_call_command_is_a_command_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="'yesterday' is not an ISO date"):
        call_command("delayq_export", "--out", str(tmp_path), "--since", "yesterday")


@pytest.mark.parametrize("args", [
    ("delayq_prune", "--older-than", "soon"),
    ("delayq_prune", "--older-than", "1d", "--batch-size", "0"),
    ("delayq_export", "--out", "/tmp", "--chunk-size", "0"),
    ("delayq_export", "--out", "/tmp", "--overlap", "-1"),
])
def test_other_bad_options_exit_2_without_a_traceback(args: tuple[str, ...]) -> None:
    proc = manage(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "CommandError" in proc.stderr


@pytest.mark.parametrize("args, named", [
    (("delayq_export", "--exclude", "nope"), "unknown column(s) nope"),
    (("delayq_export", "--exclude", "id"), "id cannot be excluded or redacted"),
    (("delayq_export", "--redact", "created_at"), "created_at cannot be excluded or redacted"),
    (("delayq_export", "--redact", "attempts"), "only text columns can be redacted, not attempts"),
    (("delayq_export", "--settle", "-3"), "--settle must be a number of seconds from 0 to "
                                          "31536000 (a year), not -3.0"),
    (("delayq_export", "--settle", "nan"), "--settle must be a number of seconds"),
    (("delayq_export", "--since", "2026-11-30", "--until", "2026-11-29"),
     "since 2026-11-30T00:00:00+00:00 is not before until 2026-11-29T00:00:00+00:00"),
    (("delayq_report", "--input", "/no-such-export"), "no exported jobs at /no-such-export"),
    (("delayq_report", "--input", "/tmp", "--bucket-seconds", "0"),
     "--bucket-seconds must be > 0, not 0 (leave it out"),
    (("delayq_report", "--input", "/tmp", "--bucket-seconds", "-5"),
     "--bucket-seconds must be > 0, not -5"),
    (("delayq_report", "--jdbc-url", "jdbc:postgresql://db:5432/shop", "--jdbc-jar",
      "/nonexistent.jar"), "--jdbc-jar /nonexistent.jar is not a file"),
])
def test_export_and_report_name_a_bad_value_and_exit_2(tmp_path: Path, args: tuple[str, ...],
                                                       named: str) -> None:
    """Nothing read, written or started: one line naming the value, exit 2 (1 is for
    failures while working). A missing jar failed after Spark started, ~10 s and a
    Py4J traceback later."""
    proc = manage(*args, "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and named in proc.stderr
    assert not (tmp_path / "out").exists()


def _finished_jobs(n: int, attempts_each: int, *, days_ago: float) -> None:
    when = timezone.now() - timedelta(days=days_ago)
    Job.objects.bulk_create([
        Job(id="p%05d" % i, queue="default", callable_path="tests.jobs.add",
            status=JobStatus.DEAD if i % 2 else JobStatus.SUCCEEDED, run_at=when,
            finished_at=when, max_attempts=attempts_each, attempts=attempts_each)
        for i in range(n)])
    JobAttempt.objects.bulk_create([
        JobAttempt(job_id="p%05d" % i, number=k, outcome=JobStatus.RETRYING, error="e")
        for i in range(n) for k in range(1, attempts_each + 1)])


@pytest.mark.django_db
def test_prune_dry_run_counts_the_attempt_rows_that_would_go() -> None:
    _finished_jobs(120, 3, days_ago=40)
    Job.objects.create(id="live", queue="default", callable_path="tests.jobs.add",
                       run_at=timezone.now(), max_attempts=3)
    JobAttempt.objects.create(job_id="live", number=1, outcome=JobStatus.RETRYING)
    out = io.StringIO()
    call_command("delayq_prune", "--older-than", "30d", "--dry-run", stdout=out)
    assert "would delete 120 jobs" in out.getvalue()
    assert "(360 attempt rows)" in out.getvalue()
    assert JobAttempt.objects.count() == 361  # nothing deleted
    call_command("delayq_prune", "--older-than", "30d", stdout=out, stderr=io.StringIO())
    assert "deleted 120 jobs" in out.getvalue() and "(360 attempt rows)" in out.getvalue()
    assert JobAttempt.objects.count() == 1
