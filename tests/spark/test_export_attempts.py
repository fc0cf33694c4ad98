"""delayq_export writes the attempt rows (``JobAttempt``) beside the jobs: read by id,
incrementally, under the jobs' column choice, with the marker that lets the report
count failed attempts; a directory begun without them goes on without them."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from django.core.management import call_command
from django.utils import timezone

from django_delayq.models import Job, JobAttempt
from django_delayq.spark.export import STATE_FILE, export_jobs
from django_delayq.spark.preflight import ATTEMPTS_MARKER
from django_delayq.spark.prune import prune_jobs
from tests.spark import plain
from tests.spark.data import ADD, BASE, known_jobs, save_jobs
from tests.spark.earlier import as_an_earlier_version_left_it
from tests.spark.workers import ATTEMPT_COLUMNS, COLUMNS

pytestmark = pytest.mark.django_db

NOW = BASE + timedelta(days=2)
OVERLAP = timedelta(seconds=60)


def _fail(job_ids: list[str], times: int = 1, kind: str = "shop.errors.Timeout") -> list[int]:
    """``times`` failed attempts of each job; returns their ids, in insertion order."""
    return [JobAttempt.objects.create(
        job_id=job_id, number=n, outcome="retrying", error_type=kind,
        error="%s timed out (attempt %d)" % (job_id, n),
        traceback="Traceback: token sk_live_%s" % job_id, worker_id="host-1").pk
        for job_id in job_ids for n in range(1, times + 1)]


def _jobs(first: int, last: int) -> list[str]:
    return ["a%03d" % i for i in range(first, last + 1)]


def _read(root: Path) -> Any:
    return ds.dataset(root / "attempts", format="parquet", partitioning="hive").to_table()


def test_attempt_rows_are_exported_beside_their_jobs(tmp_path: Path) -> None:
    save_jobs(known_jobs())
    ids = _fail(_jobs(81, 90)) + _fail(_jobs(91, 100), times=3, kind="builtins.ValueError")
    result = export_jobs(tmp_path, now=NOW, progress=False)
    assert (result.rows, result.attempt_rows) == (111, 40)
    table = _read(tmp_path)
    assert sorted(table.column("id").to_pylist()) == sorted(ids)
    assert [p.name for p in (tmp_path / "attempts").iterdir()] == ["day=2025-03-01"]
    row = table.filter(ds.field("id") == ids[-1]).to_pylist()[0]
    assert (row["job_id"], row["number"], row["error_type"]) == ("a100", 3,
                                                                 "builtins.ValueError")
    assert row["job_created_at"] == Job.objects.get(pk="a100").created_at
    assert (tmp_path / ATTEMPTS_MARKER).is_file()
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state["attempts"]["marks"][0][1] == max(ids)
    assert state["last_run_attempt_rows"] == 40


def test_attempt_rows_are_read_in_pages_never_all_at_once(tmp_path: Path) -> None:
    """Bounded memory: every query of the attempt table is a count, the highest id, or
    one keyset page of ``chunk_size`` rows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    save_jobs(known_jobs())
    _fail(_jobs(81, 100), times=2)
    with CaptureQueriesContext(connection) as queries:
        assert export_jobs(tmp_path, now=NOW, chunk_size=7, progress=False).attempt_rows == 40
    reads = [q["sql"] for q in queries if JobAttempt._meta.db_table in q["sql"]]
    pages = [sql for sql in reads if sql.endswith("LIMIT 7")]
    assert len(pages) == 40 // 7 + 2  # five full pages, one of five rows, an empty one
    assert all(sql in pages or "COUNT(" in sql or "MAX(" in sql for sql in reads), reads


def test_each_run_reads_the_ids_the_runs_before_leave_open(tmp_path: Path) -> None:
    """Run 2 takes its highest id while one row below it is inserted but not committed
    (here: deleted, then inserted again under its id after run 2). Run 3 reads above
    the highest id of the last run that is ``overlap`` older than run 2: it finds that
    row, and reads none of run 1's again."""
    save_jobs(known_jobs())
    first = _fail(_jobs(81, 85))
    one = export_jobs(tmp_path, now=NOW, overlap=OVERLAP, progress=False)
    assert one.attempt_rows == 5
    second = _fail(_jobs(86, 95))
    late = JobAttempt.objects.get(pk=second[2])
    JobAttempt.objects.filter(pk=late.pk).delete()
    two = export_jobs(tmp_path, now=NOW + timedelta(minutes=5), overlap=OVERLAP,
                      progress=False)
    assert two.attempt_rows == 5 + 9  # no run is old enough yet: from the start again
    late.save(force_insert=True)  # committed after run 2's query, under an id below its top
    three = export_jobs(tmp_path, now=NOW + timedelta(minutes=5, seconds=30),
                        overlap=OVERLAP, progress=False)
    assert three.attempt_rows == 10  # ids above run 1's top: run 2's nine and the late one
    assert sorted(set(_read(tmp_path).column("id").to_pylist())) == sorted(first + second)
    four = export_jobs(tmp_path, now=NOW + timedelta(minutes=20), overlap=OVERLAP,
                       progress=False)
    assert four.attempt_rows == 10  # run 2 began less than the overlap before run 3
    five = export_jobs(tmp_path, now=NOW + timedelta(minutes=30), overlap=OVERLAP,
                       progress=False)
    assert five.attempt_rows == 0


def test_an_attempt_row_is_exported_with_its_job_row_even_inside_the_settle_window(
        tmp_path: Path) -> None:
    """Jobs that changed after the mark (inside ``settle``: left to the next run) but whose
    attempt rows are below the run's highest id: their job rows are written with them, so
    every attempt row exported has its job row in the export; the next run exports them
    again as usual."""
    save_jobs(known_jobs())
    export_jobs(tmp_path, now=NOW, progress=False)
    now = NOW + timedelta(minutes=5)
    inside = now - timedelta(seconds=1)  # after the mark, now - 2 s
    fresh = dict(known_jobs()[0], id="fresh", created_at=inside, updated_at=inside)
    save_jobs([fresh])
    Job.objects.filter(pk="a001").update(status="retrying", attempts=2, updated_at=inside)
    _fail(["fresh", "a001", "a002"])
    result = export_jobs(tmp_path, now=now, progress=False)
    assert result.attempt_rows == 3
    assert result.rows == 2  # the window held none of them: the two jobs of the new rows
    jobs = ds.dataset(tmp_path / "jobs", format="parquet", partitioning="hive").to_table()
    exported = set(jobs.column("id").to_pylist())
    assert set(_read(tmp_path).column("job_id").to_pylist()) <= exported
    latest = jobs.filter(ds.field("id") == "a001").sort_by([("read_at", "descending")])
    assert latest.to_pylist()[0]["status"] == "retrying"
    later = export_jobs(tmp_path, now=now + timedelta(minutes=5), progress=False)
    assert later.rows == 2  # the window of the next run holds them


def test_an_attempt_row_whose_job_is_gone_is_left_out() -> None:
    """A job deleted between the attempt page and the read of its row went with its
    attempt rows: they are not written (their job row could not be)."""
    from django_delayq.spark.export_attempts import _with_jobs

    page = [(1, "a", NOW, NOW), (2, "b", NOW, NOW), (3, "c", NOW, BASE)]
    asked = []

    def job_rows(ids: list[str]) -> set[str]:
        asked.append(ids)
        return {"a"}

    assert _with_jobs(page, 1, NOW - timedelta(seconds=1), job_rows) == page[::2]
    assert asked == [["a", "b"]]  # c last changed before: in the export already


def test_the_jobs_column_choice_covers_their_attempts(tmp_path: Path) -> None:
    save_jobs(known_jobs())
    _fail(["a091"], times=2)
    out = io.StringIO()
    call_command("delayq_export", "--out", str(tmp_path), "--settle", "0", "--exclude",
                 "traceback", "--redact", "last_error,worker_id", stdout=out, verbosity=0)
    assert "exported 111 rows and 2 attempt rows in 2 files" in out.getvalue()
    table = _read(tmp_path)
    assert "traceback" not in table.column_names
    assert set(table.column("error").to_pylist()) == {"[redacted]"}
    assert set(table.column("worker_id").to_pylist()) == {"[redacted]"}
    assert set(table.column("error_type").to_pylist()) == {"shop.errors.Timeout"}
    assert "sk_live" not in str(table.to_pylist())


def test_since_until_select_attempts_by_their_jobs_created_at(tmp_path: Path) -> None:
    save_jobs(known_jobs())
    inside = _fail(["a010"], times=2)
    _fail(["a091"])  # created 11:56:31, after the range
    since, until = BASE - timedelta(minutes=5), BASE - timedelta(minutes=4, seconds=30)
    result = export_jobs(tmp_path, since=since, until=until, now=NOW, progress=False)
    assert result.attempt_rows == 2
    assert sorted(_read(tmp_path).column("id").to_pylist()) == inside


def test_a_directory_begun_without_attempt_rows_goes_on_without_them(tmp_path: Path) -> None:
    """Jobs it exported then may have been deleted since, with their attempt rows: what it
    would write now could not be complete, so it writes none and says so."""
    save_jobs(known_jobs())
    export_jobs(tmp_path, now=NOW, progress=False)
    as_an_earlier_version_left_it(tmp_path)
    _fail(["a091"])
    for extra in ((), ("--full",)):
        out = io.StringIO()
        call_command("delayq_export", "--out", str(tmp_path), "--settle", "0", *extra,
                     stdout=out, verbosity=0)
        assert "attempt rows not exported: %s was begun before" % tmp_path in out.getvalue()
    assert not (tmp_path / "attempts").exists() and not (tmp_path / ATTEMPTS_MARKER).exists()
    assert "attempts" not in json.loads((tmp_path / STATE_FILE).read_text())


def test_an_archive_only_directory_is_marked_complete_an_earlier_export_is_not(
        tmp_path: Path) -> None:
    old = tmp_path / "old"
    for archive in (old, tmp_path / "archive"):
        save_jobs(known_jobs())
        _fail(["a091"])
        if archive == old:
            export_jobs(old, now=NOW, progress=False)
            as_an_earlier_version_left_it(old)
        Job.objects.update(finished_at=timezone.now() - timedelta(days=40))
        assert prune_jobs(timedelta(days=30), archive=archive, progress=False).attempts == 1
        Job.objects.all().delete()  # the live one
    assert not (old / ATTEMPTS_MARKER).exists()  # its jobs exported then lack theirs
    assert (tmp_path / "archive" / ATTEMPTS_MARKER).is_file()  # each job came with its own
    assert _read(tmp_path / "archive").num_rows == 1


def test_the_report_counts_the_failed_attempts_of_jobs_that_later_succeeded(
        tmp_path: Path, spark: Any) -> None:
    """Jobs 81-90 succeeded at their second attempt, after one timeout each (their rows
    keep no error); jobs 91-100 died after three ``ValueError`` attempts. Read through a
    ``file://`` URL (as Spark reads s3a:// or hdfs://), and without the marker."""
    from django_delayq.spark.source import read_attempts, read_jobs
    from django_delayq.spark.summary import compute_report

    save_jobs(known_jobs())
    _fail(_jobs(81, 90))
    _fail(_jobs(91, 100), times=3, kind="builtins.ValueError")
    export_jobs(tmp_path / "export", now=NOW, progress=False)
    url = "file://%s" % (tmp_path / "export")
    report = compute_report(read_jobs(spark, url), attempts=read_attempts(spark, url))
    got = {(g["queue"], g["callable"]): g["top_errors"] for g in report["groups"]}
    assert [(e["error"], e["failed_attempts"], e["dead_jobs"], e["failed_jobs"])
            for e in got[("default", ADD)]] == [("builtins.ValueError", 30, 10, 10),
                                                ("shop.errors.Timeout", 10, 0, 0)]
    expected = plain.figures(list(Job.objects.values(*COLUMNS)),
                             list(JobAttempt.objects.values(*ATTEMPT_COLUMNS)))
    assert got == {level: figures["top_errors"] for level, figures in expected.items()}
    as_an_earlier_version_left_it(tmp_path / "export")
    assert read_attempts(spark, url) is None


def test_the_marks_kept_stay_few_and_keep_the_newest() -> None:
    """Runs more frequent than the overlap pile marks up; beyond ``MAX_MARKS`` every other
    one goes (a run then reads from an older mark: more, never less)."""
    from django_delayq.spark.export_attempts import MAX_MARKS, Window, next_state

    marks = tuple(((NOW + timedelta(seconds=i)).isoformat(), 100 * i) for i in range(MAX_MARKS))
    window = Window(lower=0, upper=100 * MAX_MARKS, before=NOW + timedelta(seconds=99),
                    after=NOW + timedelta(seconds=100), floor=7, marks=marks)
    state = next_state(window)
    kept = [tuple(m) for m in state["marks"]]
    assert len(kept) <= MAX_MARKS and kept[0] == marks[0]
    assert kept[-1] == (window.after.isoformat(), window.upper)
    assert set(kept[:-1]) <= set(marks) and state["floor"] == 7


def test_a_run_writes_each_job_row_once(tmp_path: Path) -> None:
    """A job that failed lately is in the run's window and has attempt rows whose job
    changed after the mark minus the overlap: its row is written once, not again by id;
    nor is a job (inside ``settle``) whose attempt rows span two pages written twice."""
    save_jobs(known_jobs())
    export_jobs(tmp_path, now=NOW, overlap=OVERLAP, progress=False)
    now = NOW + timedelta(minutes=5)
    lately, inside = now - timedelta(seconds=20), now - timedelta(seconds=1)
    Job.objects.filter(pk__in=["a001", "a002"]).update(status="retrying", updated_at=lately)
    Job.objects.filter(pk="a003").update(status="retrying", updated_at=inside)
    _fail(["a001", "a002", "a003"], times=2)
    result = export_jobs(tmp_path, now=now, overlap=OVERLAP, chunk_size=1, progress=False)
    assert result.attempt_rows == 6
    assert result.rows == 3  # a001 and a002 by the window, a003 by id: once each
    jobs = ds.dataset(tmp_path / "jobs", format="parquet", partitioning="hive").to_table()
    ids = jobs.filter(ds.field("status") == "retrying").column("id").to_pylist()
    assert sorted(ids) == ["a001", "a002", "a003"]
