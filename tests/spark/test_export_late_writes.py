"""A real worker whose audit writes commit late: the incremental export still gets them.

The worker stamps ``updated_at`` with its own start and finish times and writes them
in buffered batches, retried while the database is locked. Here a second connection
holds SQLite's write lock while the worker finishes every job, an export runs in that
moment (it sees the rows still ``scheduled``), then the lock is released and the late
writes commit with stamps older than that export's mark. The overlap is 0, so only
the record of live, due rows (``django_delayq.spark.pending``) can find them.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pyarrow.dataset as ds
import pytest
from django.db import connection

from django_delayq import JobSpec, schedule_many
from django_delayq.core.connection import get_engine
from django_delayq.models import Job
from django_delayq.spark.export import export_jobs
from tests.helpers import wait_until
from tests.worker.conftest import worker_starter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

JOBS = 300


@pytest.fixture
def start_worker(delayq_settings: Any, tmp_path: Any) -> Iterator[Callable[..., Any]]:
    yield from worker_starter(delayq_settings, tmp_path)


def _newest_per_id(root: Any) -> dict[str, str]:
    """Plain Python: per id, the status of the version read last (then updated last)."""
    rows = ds.dataset(root / "jobs", format="parquet", partitioning="hive").to_table(
        columns=["id", "status", "read_at", "updated_at"]).to_pylist()
    rows.sort(key=lambda r: (r["read_at"], r["updated_at"]))
    return {r["id"]: r["status"] for r in rows}


def _queue_drained() -> bool:
    stats = get_engine().stats("default")
    return stats.scheduled + stats.ready + stats.inflight == 0


@pytest.mark.skipif(os.environ.get("DELAYQ_TEST_DB") == "postgres",
                    reason="holds SQLite's write lock")
def test_writes_committed_after_an_export_are_exported_next_time(
        start_worker: Any, tmp_path: Any, spark: Any) -> None:
    root = tmp_path / "export"
    schedule_many("tests.jobs.noop", [JobSpec(args=(i,)) for i in range(JOBS)])
    export_jobs(root, settle=timedelta(0), progress=False)  # all 300 scheduled
    lock = sqlite3.connect(str(connection.settings_dict["NAME"]), timeout=30)
    lock.execute("BEGIN IMMEDIATE")  # SQLite's write lock: readers go on, writers wait
    try:
        worker = start_worker("--concurrency", "4")
        wait_until(_queue_drained, timeout=60, step=0.1)  # every job ran; rows not written
        assert Job.objects.filter(status="succeeded").count() == 0
        during = export_jobs(root, settle=timedelta(0), overlap=timedelta(0),
                             progress=False)
    finally:
        lock.rollback()
        lock.close()
    wait_until(lambda: Job.objects.filter(status="succeeded").count() == JOBS, timeout=60,
               step=0.1)
    stamps = Job.objects.values_list("updated_at", flat=True)
    assert max(stamps) < during.mark  # the late writes carry stamps the mark has passed
    after = export_jobs(root, settle=timedelta(0), overlap=timedelta(0),
                        progress=False)
    assert after.rows == JOBS
    database = dict(Job.objects.values_list("id", "status"))
    assert _newest_per_id(root) == database
    assert set(database.values()) == {"succeeded"}
    again = export_jobs(root, settle=timedelta(0), overlap=timedelta(0),
                        progress=False)
    assert again.rows == 0
    from django_delayq.spark.source import read_jobs

    statuses = read_jobs(spark, root).groupBy("status").count().collect()
    assert {r["status"]: r["count"] for r in statuses} == {"succeeded": JOBS}
    worker.terminate()
    worker.wait(30)
