"""ColumnWriter's column-wise writes (schedule_dataframe's sink) on the test database:
SQLite here, PostgreSQL too with DELAYQ_TEST_DB=postgres."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from django_delayq.models import Job
from django_delayq.spark.column_rows import ColumnWriter, copy_escape, text_datetimes

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
ADD = "tests.jobs.add"


def _writer() -> ColumnWriter:
    columns = {"queue": "emails", "callable_path": ADD, "max_attempts": 2, "backoff": [1, 2]}
    return ColumnWriter("default", columns, now=NOW)


def _run_at(writer: ColumnWriter, moment: datetime) -> object:
    if text_datetimes("default") == "sqlite":
        return str(moment.replace(tzinfo=None))
    return writer.adapt(moment)


def test_insert_columns_writes_every_value() -> None:
    writer = _writer()
    due = [NOW + timedelta(seconds=i) for i in range(3)]
    writer.insert_columns({
        "id": ["a1", "a2", "a3"], "key": [None, "k'2", "k\t3"],
        "args": ["[1]", '["x\\"y"]', "[null]"], "kwargs": ["{}", '{"b":2}', "{}"],
        "run_at": [_run_at(writer, d) for d in due]}, ignore_conflicts=False)
    rows = {job.id: job for job in Job.objects.all()}
    assert [rows[i].run_at for i in ("a1", "a2", "a3")] == due
    assert (rows["a2"].args, rows["a2"].kwargs, rows["a2"].key) == (['x"y'], {"b": 2}, "k'2")
    job = rows["a3"]
    assert (job.queue, job.callable_path, job.status, job.max_attempts, job.backoff) == (
        "emails", ADD, "scheduled", 2, [1, 2])
    assert (job.created_at, job.key, job.args, job.cancel_requested) == (NOW, "k\t3", [None],
                                                                          False)
    assert writer.existing(["a2", "zz", "a3"]) == {"a2", "a3"}
    assert writer.existing([]) == set()


def test_insert_columns_ignores_conflicts_when_asked() -> None:
    writer = _writer()
    one = {"id": ["b1"], "key": ["k"], "args": ["[1]"], "kwargs": ["{}"],
           "run_at": [_run_at(writer, NOW)]}
    writer.insert_columns(one, ignore_conflicts=False)
    writer.insert_columns({**one, "args": ["[2]"]}, ignore_conflicts=True)
    assert list(Job.objects.values_list("args", flat=True)) == [[1]]


@pytest.mark.skipif(os.environ.get("DELAYQ_TEST_DB") != "postgres",
                    reason="COPY is PostgreSQL's: make test's PostgreSQL pass runs this")
def test_copy_with_new_only_returns_the_new_ids() -> None:
    assert text_datetimes("default") == "copy"
    writer = _writer()

    def line(job_id: str, key: str | None) -> str:
        varying = {"id": job_id, "key": copy_escape(key), "args": '["a\\\\tb"]',
                   "kwargs": "{}", "run_at": "2030-01-02 03:04:05.5+00:00"}
        layout = writer.copy_layout()
        return "\t".join(varying[f.attname] if c is None else c
                         for f, c in zip(writer.fields, layout, strict=True)) + "\n"

    with transaction.atomic():
        assert writer.copy_text(line("c1", "x\\y\tz"), new_only=False) is None
    with transaction.atomic():
        new = writer.copy_text(line("c1", None) + line("c2", None), new_only=True)
    assert new == ["c2"]
    job = Job.objects.get(pk="c1")
    assert (job.key, job.args, job.run_at) == ("x\\y\tz", ["a\tb"],  # JSON \t: a tab
                                               datetime(2030, 1, 2, 3, 4, 5, 500000, tzinfo=UTC))
