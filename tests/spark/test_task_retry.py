"""A Spark task that fails and is retried schedules none of its rows twice, keyed or not.

Spark re-runs a failed task (``spark.task.maxFailures``, 4 on a cluster): the retry reads
its partition again from the first row, while the batches the failed attempt committed
stay. The session of the other tests (``local[2]``) never retries a task, so a driver of
its own runs here, in another process, on ``local[1,2]`` (local mode with two attempts
per task, as a cluster retries), on the same test database and redis-server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from django_delayq.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

DRIVER = r"""
import json
from pyspark import TaskContext
from pyspark.sql import functions as F
from django_delayq.spark import schedule_dataframe
from django_delayq.spark.session import build_session

spark = build_session("local[1,2]", app_name="delayq-retry", conf={
    "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
spark.sparkContext.setLogLevel("OFF")
SETTINGS = "tests.spark.executor_settings"
rows = spark.createDataFrame([(i, "k%d" % i if i % 2 else None) for i in range(40)],
                             "order_id long, k string").coalesce(1)


@F.udf("double")
def first_attempt_fails(order_id):  # row 25 is bad in the task's first attempt only
    return -5.0 if order_id == 25 and TaskContext.get().attemptNumber() == 0 else 1.0


out = {}
always = rows.withColumn("delay", F.when(F.col("order_id") == 25, -5.0).otherwise(1.0))
for name, frame, queue, key in (("always", always, "default", None),
                                ("once", rows.withColumn("delay", first_attempt_fails("order_id")),
                                 "emails", None),
                                ("once_keyed", rows.withColumn("delay",
                                                               first_attempt_fails("order_id")),
                                 "slow", "k")):
    try:
        out[name] = schedule_dataframe(frame, "tests.jobs.add", delay_col="delay",
                                       args_cols=["order_id"], key_col=key, queue=queue,
                                       batch_size=10, settings_module=SETTINGS)
    except Exception as exc:
        out[name] = "failed" if "delay must be >= 0" in str(exc) else str(exc)[-2000:]
spark.stop()
print("RESULT " + json.dumps(out))
"""


def _pending(queue: str) -> int:
    from django_delayq.core.connection import get_engine

    stats = get_engine().stats(queue)
    return stats.scheduled + stats.ready


def _scheduled(queue: str) -> list[int]:
    return sorted(a[0] for a in Job.objects.filter(queue=queue).values_list("args", flat=True))


def test_a_retried_task_schedules_none_of_its_rows_again(spark: Any, spark_delayq: Any) -> None:
    """Row 25 fails its batch: the batches before it (rows 0-19) are committed, then the
    task fails. ``always``: every attempt fails there, and rows 0-19 are scheduled once
    (each attempt used to add them again: 40 jobs on two attempts, 80 on four).
    ``once``: the retry succeeds and schedules rows 20-39, skipping rows 0-19; with
    half the rows keyed (``once_keyed``) the same."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True,
                          env=env, cwd=str(root), timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stdout + done.stderr
    result = json.loads(lines[0][len("RESULT "):])
    assert result == {"always": "failed", "once": 40, "once_keyed": 40}
    assert _scheduled("default") == list(range(20))
    assert _scheduled("emails") == list(range(40))
    assert _scheduled("slow") == list(range(40))
    assert (_pending("default"), _pending("emails"), _pending("slow")) == (20, 40, 40)
