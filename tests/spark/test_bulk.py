"""schedule_dataframe: real executors, the test database, the private redis-server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_delayq.exceptions import InvalidJob
from django_delayq.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "tests.jobs.add"
SETTINGS = "tests.spark.executor_settings"


def _frame(spark: Any, n: int) -> Any:
    from pyspark.sql import functions as F

    return (spark.range(n).repartition(2)
            .withColumn("a", F.col("id").cast("int")).withColumn("b", F.lit(7))
            .withColumn("key", F.concat(F.lit("order-"), F.col("id").cast("string")))
            .withColumn("delay", F.lit(3600.0)))


def _pending(queue: str = "default") -> int:
    from django_delayq.connection import get_engine

    stats = get_engine().stats(queue)
    return stats.scheduled + stats.ready


def test_one_job_per_row_in_redis_and_audit_table(spark: Any, spark_delayq: Any) -> None:
    from django_delayq.spark import schedule_dataframe

    n = 2500  # several batches of 1000 per partition
    count = schedule_dataframe(_frame(spark, n), ADD, delay_col="delay", args_cols=["a"],
                               kwargs_cols=["b"], key_col="key", settings_module=SETTINGS)
    assert count == n
    assert Job.objects.count() == n
    assert _pending() == n
    job = Job.objects.get(key="order-42")
    assert (job.callable_path, job.args, job.kwargs, job.queue) == (ADD, [42], {"b": 7},
                                                                    "default")
    assert job.run_at - job.created_at == timedelta(hours=1)


def test_retried_input_never_schedules_a_row_twice(spark: Any, spark_delayq: Any) -> None:
    from django_delayq.spark import schedule_dataframe

    df = _frame(spark, 300)
    schedule_dataframe(df, ADD, args_cols=["a", "b"], key_col="key", settings_module=SETTINGS)
    again = schedule_dataframe(df, ADD, args_cols=["a", "b"], key_col="key",
                               settings_module=SETTINGS)
    assert again == 300
    assert Job.objects.count() == 300 and _pending() == 300


def test_at_column_sets_the_due_time(spark: Any, spark_delayq: Any) -> None:
    from pyspark.sql import functions as F

    from django_delayq.spark import schedule_dataframe

    due = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    df = _frame(spark, 10).withColumn(
        "due", F.timestamp_seconds(F.lit(due.timestamp()) + F.col("id")))
    schedule_dataframe(df, ADD, at_col="due", args_cols=["a", "b"], queue="emails",
                       settings_module=SETTINGS)
    runs = sorted(Job.objects.filter(queue="emails").values_list("run_at", flat=True))
    assert runs == [due + timedelta(seconds=i) for i in range(10)]
    assert _pending("emails") == 10


def test_bad_input_fails_on_the_driver_naming_it(spark: Any, spark_delayq: Any) -> None:
    from django_delayq.spark import schedule_dataframe

    df = _frame(spark, 5)
    with pytest.raises(InvalidJob, match="args_cols: column 'nope'"):
        schedule_dataframe(df, ADD, args_cols=["a", "nope"], settings_module=SETTINGS)
    with pytest.raises(InvalidJob, match="key_col: column 'missing'"):
        schedule_dataframe(df, ADD, key_col="missing", settings_module=SETTINGS)
    with pytest.raises(InvalidJob, match="not both"):
        schedule_dataframe(df, ADD, at_col="a", delay_col="delay", settings_module=SETTINGS)
    with pytest.raises(InvalidJob, match="at_col 'key' has type string"):
        schedule_dataframe(df, ADD, at_col="key", settings_module=SETTINGS)
    with pytest.raises(InvalidJob, match="unknown queue"):
        schedule_dataframe(df, ADD, queue="nowhere", settings_module=SETTINGS)
    assert not Job.objects.exists()


def test_executor_errors_surface_on_the_driver(spark: Any, spark_delayq: Any) -> None:
    from pyspark.sql import functions as F

    from django_delayq.spark import schedule_dataframe

    df = _frame(spark, 5).withColumn("when", F.current_date())  # a date is not JSON
    with pytest.raises(Exception, match="JSON"):
        schedule_dataframe(df, ADD, args_cols=["when"], settings_module=SETTINGS)
