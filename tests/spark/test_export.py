"""delayq_export: Parquet partitioned by day, chunked, incremental; then the report reads it."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from typing import Any

import pyarrow.dataset as ds
import pytest
from django.core.management import CommandError, call_command

from django_delayq.models import Job
from django_delayq.spark.export import STATE_FILE, BadArgument, export_jobs
from tests.spark.data import BASE, known_jobs, save_jobs

pytestmark = pytest.mark.django_db

NOW = BASE + timedelta(days=2)


def _read(root: Any) -> Any:
    return ds.dataset(root / "jobs", format="parquet", partitioning="hive").to_table()


def test_export_partitions_by_day_in_chunks(tmp_path: Any) -> None:
    jobs = known_jobs()
    jobs[0]["created_at"] = BASE - timedelta(days=1)
    save_jobs(jobs)
    result = export_jobs(tmp_path, chunk_size=7, now=NOW, progress=False)
    assert result.rows == len(jobs) == 111
    days = sorted(p.name for p in (tmp_path / "jobs").iterdir())
    assert days == ["day=2025-02-28", "day=2025-03-01"]
    table = _read(tmp_path)
    assert sorted(table.column("id").to_pylist()) == sorted(j["id"] for j in jobs)
    row = table.filter(ds.field("id") == "a091").to_pylist()[0]
    assert row["status"] == "dead" and row["attempts"] == 3 and json.loads(row["args"]) == [1, 2]
    assert row["started_at"] == jobs[90]["started_at"]
    assert not list(tmp_path.rglob(".*.tmp"))


FULL_ROW = {"priority": 5, "timeout": 2.5, "expires_at": BASE + timedelta(hours=1),
            "retry_on": ["shop.errors.Timeout"], "scheduled_for": BASE,
            "requeued_from": "01JOLDJOBOLDJOBOLDJOBOLDJO", "progress": {"done": 3},
            "task_backend": "default", "parents_left": 2, "group": "tenant-7", "atomic": True}


def test_the_files_hold_every_column_of_the_audit_row(tmp_path: Any) -> None:
    """Every column of ``Job`` is exported (JSON fields as JSON text), and archived by
    ``delayq_prune``; each may be excluded, and a text one redacted."""
    jobs = known_jobs()
    jobs[0].update(FULL_ROW)
    save_jobs(jobs)
    export_jobs(tmp_path / "all", now=NOW, progress=False)
    table = _read(tmp_path / "all")
    fields = {f.attname for f in Job._meta.concrete_fields}
    assert set(table.column_names) == fields | {"read_at", "day"}
    row = table.filter(ds.field("id") == jobs[0]["id"]).to_pylist()[0]
    json_fields = {"retry_on", "progress"}
    assert {k: json.loads(row[k]) if k in json_fields else row[k] for k in FULL_ROW} == FULL_ROW
    export_jobs(tmp_path / "some", now=NOW, progress=False, exclude="group,retry_on",
                redact="progress,task_backend")
    row = _read(tmp_path / "some").filter(ds.field("id") == jobs[0]["id"]).to_pylist()[0]
    assert "group" not in row and "retry_on" not in row and row["priority"] == 5
    assert (json.loads(row["progress"]), row["task_backend"]) == ("[redacted]", "[redacted]")


def test_second_run_exports_only_new_and_changed_rows(tmp_path: Any) -> None:
    save_jobs(known_jobs())
    first = export_jobs(tmp_path, now=NOW, progress=False)
    assert first.rows == 111
    again = export_jobs(tmp_path, now=NOW + timedelta(minutes=1), progress=False)
    assert again.rows == 0
    later = NOW + timedelta(minutes=2)
    Job.objects.filter(pk="e011").update(status="succeeded", updated_at=later)
    extra = dict(known_jobs()[0], id="new1", created_at=later, updated_at=later)
    save_jobs([extra])
    third = export_jobs(tmp_path, now=later + timedelta(minutes=1), progress=False)
    assert third.rows == 2 and third.previous_mark == again.mark
    assert json.loads((tmp_path / STATE_FILE).read_text())["runs"] == 3
    assert _read(tmp_path).num_rows == 113  # e011 twice: readers keep its newest version


def test_since_until_filter_and_range_is_remembered(tmp_path: Any) -> None:
    save_jobs(known_jobs())
    since, until = BASE - timedelta(minutes=5), BASE - timedelta(minutes=4, seconds=30)
    result = export_jobs(tmp_path, since=since, until=until, now=NOW, progress=False)
    # created 11:55:00 <= t < 11:55:30: default jobs 1-29, all 11 emails jobs
    assert result.rows == 29 + 11
    with pytest.raises(ValueError, match="--since"):
        export_jobs(tmp_path, now=NOW, progress=False)


def test_command_prints_progress_and_summary(tmp_path: Any) -> None:
    save_jobs(known_jobs())
    out, err = io.StringIO(), io.StringIO()
    call_command("delayq_export", "--out", str(tmp_path), "--settle", "0", "--chunk-size", "50",
                 stdout=out, stderr=err)
    assert "exported 111 rows" in out.getvalue()
    assert "delayq_export 100% 111/111" in err.getvalue()
    with pytest.raises(CommandError, match="not an ISO date"):
        call_command("delayq_export", "--out", str(tmp_path), "--since", "yesterday")


@pytest.mark.timeout(900)  # a whole local Spark report, often the JVM's first: 25 s alone, 4x loaded
def test_report_command_reads_the_export(tmp_path: Any, spark: Any) -> None:
    save_jobs(known_jobs())
    export_jobs(tmp_path / "export", now=NOW, progress=False)
    Job.objects.filter(pk="a001").update(status="dead", updated_at=NOW + timedelta(minutes=1))
    export_jobs(tmp_path / "export", now=NOW + timedelta(minutes=2), progress=False)
    out = io.StringIO()
    call_command("delayq_report", "--input", str(tmp_path / "export"), "--out",
                 str(tmp_path / "report"), stdout=out)
    assert "111 jobs" in out.getvalue()
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    add = next(g for g in report["groups"] if g["callable"] == "tests.jobs.add")
    assert add["status"]["dead"] == 11 and add["lateness_ms"]["p95"] == 95.05
    assert (tmp_path / "report" / "report.html").exists()


def test_a_link_planted_at_the_old_temporary_state_path_is_not_followed(tmp_path: Any) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    root = tmp_path / "export"
    root.mkdir()
    (root / (STATE_FILE + ".tmp")).symlink_to(victim)  # the fixed name earlier runs used
    save_jobs(known_jobs())
    assert export_jobs(root, now=NOW, progress=False).rows == 111
    assert victim.read_text() == "precious"
    assert json.loads((root / STATE_FILE).read_text())["runs"] == 1
    assert not (root / STATE_FILE).is_symlink()
    assert [p.name for p in root.glob(".*tmp")] == []  # the random temporary file is gone


def test_a_link_at_the_state_file_is_refused_not_followed(tmp_path: Any) -> None:
    # The link would feed the export someone else's mark (skipping rows) and, on the
    # write, replace the file it points to.
    victim = tmp_path / "victim.json"
    victim.write_text(json.dumps({"high_water": "2999-01-01T00:00:00+00:00", "runs": 7,
                                  "since": None, "until": None}))
    before = victim.read_text()
    root = tmp_path / "export"
    root.mkdir()
    (root / STATE_FILE).symlink_to(victim)
    save_jobs(known_jobs())
    with pytest.raises(ValueError, match="symlink"):
        export_jobs(root, now=NOW, progress=False)
    with pytest.raises(CommandError, match="symlink"):
        call_command("delayq_export", "--out", str(root), "--settle", "0", verbosity=0)
    assert victim.read_text() == before
    assert not (root / "jobs").exists()


def test_exclude_and_redact_keep_secrets_out_of_the_files(tmp_path: Any) -> None:
    jobs = known_jobs()
    jobs[0].update(args=["sk_live_TOKEN"], kwargs={"email": "ann@example.com"},
                   last_error="HTTPError: 401 for sk_live_TOKEN")
    save_jobs(jobs)
    out = io.StringIO()
    call_command("delayq_export", "--out", str(tmp_path), "--settle", "0", "--exclude",
                 "kwargs,traceback", "--exclude", "result", "--redact", "args,last_error",
                 stdout=out, verbosity=0)
    assert "exported 111 rows" in out.getvalue()
    table = _read(tmp_path)
    assert not {"kwargs", "traceback", "result"} & set(table.column_names)
    assert {json.loads(v) for v in table.column("args").to_pylist()} == {"[redacted]"}
    row = table.filter(ds.field("id") == "a001").to_pylist()[0]
    assert row["last_error"] == "[redacted]" and row["status"] == "succeeded"
    assert table.filter(ds.field("id") == "a002").to_pylist()[0]["last_error"] == ""
    assert "sk_live_TOKEN" not in str(table.to_pylist())
    assert "ann@example.com" not in str(table.to_pylist())
    with pytest.raises(CommandError, match="--exclude kwargs,result,traceback --redact args"):
        call_command("delayq_export", "--out", str(tmp_path), "--redact", "args", verbosity=0)


@pytest.mark.parametrize("option, value, message", [
    ("--exclude", "nope", "unknown column"),
    ("--redact", "args,nope", "unknown column"),
    ("--exclude", "id", "cannot be excluded or redacted"),
    ("--redact", "updated_at", "cannot be excluded or redacted"),
    ("--redact", "attempts", "only text columns can be redacted, not attempts"),
])
def test_bad_column_choices_are_refused(tmp_path: Any, option: str, value: str,
                                        message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("delayq_export", "--out", str(tmp_path), option, value, verbosity=0)
    assert not (tmp_path / STATE_FILE).exists()


def test_report_on_an_export_without_job_files_says_zero_jobs(tmp_path: Any,
                                                             spark: Any) -> None:
    export_jobs(tmp_path / "export", now=NOW, progress=False)  # an empty table: no files
    (tmp_path / "export" / "jobs" / "day=2025-03-01").mkdir(parents=True)
    (tmp_path / "export" / "jobs" / "day=2025-03-01" / ".export-x.parquet.tmp").write_text("")
    out = io.StringIO()
    call_command("delayq_report", "--input", str(tmp_path / "export"), "--out",
                 str(tmp_path / "report"), stdout=out)
    assert out.getvalue().startswith("0 jobs; report written to")
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["jobs"] == 0 and report["groups"] == [] and report["series"] == []


def test_unusable_directories_are_named_not_a_traceback(tmp_path: Any, spark: Any) -> None:
    save_jobs(known_jobs()[:3])
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    for bad in (blocker, blocker / "sub", "/proc/1/delayq-export"):
        with pytest.raises(CommandError, match=r"cannot export to %s: .* \(give a directory"
                           % str(bad)):
            call_command("delayq_export", "--out", str(bad), "-v", "0")
    export_jobs(tmp_path / "export", now=NOW, progress=False)
    with pytest.raises(CommandError, match=r"cannot write the report to %s/sub: " % blocker):
        call_command("delayq_report", "--input", str(tmp_path / "export"),
                     "--out", str(blocker / "sub"))


def test_a_change_stamped_by_a_clock_behind_is_exported(tmp_path: Any) -> None:
    """A worker whose clock runs 10 minutes behind stamps a finished job with a time
    long before the last mark: the record of live, due rows still finds it."""
    save_jobs(known_jobs())
    Job.objects.filter(pk="e011").update(run_at=NOW - timedelta(minutes=1))  # due
    export_jobs(tmp_path, now=NOW, progress=False)
    behind = NOW - timedelta(minutes=10)
    Job.objects.filter(pk="e011").update(status="succeeded", updated_at=behind,
                                         started_at=behind, finished_at=behind)
    later = export_jobs(tmp_path, now=NOW + timedelta(minutes=1), progress=False)
    assert later.rows == 1
    rows = _read(tmp_path).filter(ds.field("id") == "e011").to_pylist()
    newest = max(rows, key=lambda r: r["read_at"])
    assert newest["status"] == "succeeded" and len(rows) == 2
    assert export_jobs(tmp_path, now=NOW + timedelta(minutes=2), progress=False).rows == 0


def test_overlap_option_reaches_the_export_and_bad_values_are_refused(tmp_path: Any) -> None:
    call_command("delayq_export", "--out", str(tmp_path), "--settle", "0", "--overlap", "120",
                 verbosity=0, stdout=io.StringIO())
    assert json.loads((tmp_path / STATE_FILE).read_text())["overlap_seconds"] == 120.0
    call_command("delayq_export", "--out", str(tmp_path), "--settle", "0", verbosity=0,
                 stdout=io.StringIO())
    assert json.loads((tmp_path / STATE_FILE).read_text())["overlap_seconds"] == 60.0
    for bad in ("-1", "nan", "inf", "1e12"):
        with pytest.raises(CommandError, match="--overlap must be a number of seconds"):
            call_command("delayq_export", "--out", str(tmp_path), "--overlap", bad, verbosity=0)


@pytest.mark.parametrize("arguments, message", [
    ({"overlap": timedelta(seconds=-5)}, "overlap must be a timedelta from 0 to 365 days "
                                         "(a year), not timedelta(seconds=-5.0)"),
    ({"overlap": 600}, "overlap must be a timedelta from 0 to 365 days (a year), not 600"),
    ({"overlap": timedelta(days=366)}, "overlap must be a timedelta from 0 to 365 days (a "
                                       "year), not timedelta(seconds=31622400.0)"),
    ({"settle": timedelta(seconds=-3)}, "settle must be a timedelta from 0 to 365 days (a "
                                        "year), not timedelta(seconds=-3.0)"),
    ({"settle": 2.0}, "settle must be a timedelta from 0 to 365 days (a year), not 2.0"),
    ({"chunk_size": 0}, "chunk_size must be an int > 0, not 0"),
    ({"chunk_size": "5000"}, "chunk_size must be an int > 0, not '5000'"),
    ({"since": NOW, "until": NOW}, "since %s is not before until %s: the range is empty"
                                   % (NOW.isoformat(), NOW.isoformat())),
    ({"since": NOW.replace(tzinfo=None)}, "since must be a datetime with a time zone, not "
                                          "datetime.datetime(2025, 3, 3, 12, 0)"),
    ({"until": "2025-03-01"}, "until must be a datetime with a time zone, not '2025-03-01'"),
])
def test_export_jobs_checks_its_arguments_before_anything(tmp_path: Any, arguments: Any,
                                                          message: str) -> None:
    """A negative overlap was written to the state file (which the next run refused), a
    negative settle put the mark in the future, an int overlap failed in a TypeError."""
    with pytest.raises(BadArgument, match="^%s$" % re.escape(message)):
        export_jobs(tmp_path / "export", now=NOW, progress=False, **arguments)
    assert not (tmp_path / "export").exists()
