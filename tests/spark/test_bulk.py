"""schedule_dataframe: real executors, the test database, the private redis-server."""

from __future__ import annotations

import re
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
    from django_delayq.core.connection import get_engine

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


def test_a_timestamp_ntz_column_is_read_in_the_session_time_zone(spark: Any,
                                                                 spark_delayq: Any) -> None:
    """A ``timestamp_ntz`` wall time is read in Spark's session time zone (UTC in a
    ``build_session`` session, whatever TIME_ZONE says), as Spark casts it; in another
    zone, say so with ``to_utc_timestamp`` (docs/pipeline.md)."""
    from pyspark.sql import functions as F

    from django_delayq.spark import schedule_dataframe

    df = _frame(spark, 2).withColumn(
        "due", F.make_timestamp_ntz(F.lit(2030), F.lit(1), F.lit(2), F.lit(3), F.lit(4),
                                    F.lit(5)))
    assert df.schema["due"].dataType.simpleString() == "timestamp_ntz"
    wall = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    schedule_dataframe(df, ADD, at_col="due", args_cols=["a"], queue="emails",
                       settings_module=SETTINGS)
    schedule_dataframe(df.withColumn("due", F.to_utc_timestamp("due", "America/New_York")),
                       ADD, at_col="due", args_cols=["a"], queue="slow",
                       settings_module=SETTINGS)
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        schedule_dataframe(df, ADD, at_col="due", args_cols=["a"], settings_module=SETTINGS)
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    for queue, shift in (("emails", 0), ("slow", 5), ("default", -9)):
        runs = set(Job.objects.filter(queue=queue).values_list("run_at", flat=True))
        assert runs == {wall + timedelta(hours=shift)}, queue


def test_epoch_seconds_set_the_due_time_within_schedules_bounds(spark: Any,
                                                               spark_delayq: Any) -> None:
    """Epoch seconds are converted in the executor: NaN is named with its row (not Spark's
    cast error), and a time ``schedule(at=...)`` refuses (more than 100 years ahead) is
    refused, not stored."""
    from pyspark.sql import functions as F

    from django_delayq.spark import schedule_dataframe

    due = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    df = _frame(spark, 10).withColumn("due", F.lit(due.timestamp()) + F.col("id"))
    assert schedule_dataframe(df, ADD, at_col="due", args_cols=["a"], key_col="key",
                              settings_module=SETTINGS) == 10
    assert sorted(Job.objects.values_list("run_at", flat=True)) == [
        due + timedelta(seconds=i) for i in range(10)]
    for value, message in ((float("nan"), r"at_col 'due' = nan \(epoch seconds: not finite, "
                                          r"the DataFrame row with key = 'order-3'\)"),
                           (3e11, r"at_col 'due' = 300000000000.0 \(epoch seconds\) is more "
                                  r"than 100 years from now .* \(the DataFrame row with key = "
                                  r"'order-3'\)")):
        bad = df.withColumn("due", F.when(F.col("id") == 3, F.lit(value)).otherwise(F.col("due")))
        with pytest.raises(Exception, match=message):
            schedule_dataframe(bad.coalesce(1), ADD, at_col="due", key_col="key",
                               settings_module=SETTINGS)
    assert Job.objects.count() == 10 and _pending() == 10


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
    for bad, shown in ((1.5, "1.5"), ("x", "'x'"), (True, "True"), (0, "0"), (-1, "-1")):
        with pytest.raises(InvalidJob, match=r"^batch_size must be an integer of at least 1 "
                                             r"\(not a bool\), not %s$" % re.escape(shown)):
            schedule_dataframe(df, ADD, batch_size=bad, settings_module=SETTINGS)
    assert not Job.objects.exists()


def test_executor_errors_surface_on_the_driver(spark: Any, spark_delayq: Any) -> None:
    from pyspark.sql import functions as F

    from django_delayq.spark import schedule_dataframe

    df = _frame(spark, 5).withColumn("when", F.current_date())  # a date is not JSON
    with pytest.raises(Exception, match="JSON"):
        schedule_dataframe(df, ADD, args_cols=["when"], settings_module=SETTINGS)


def _typed_frame(spark: Any, n: int) -> Any:
    from pyspark.sql import types as T

    schema = T.StructType([
        T.StructField("id", T.LongType()), T.StructField("s", T.StringType()),
        T.StructField("flag", T.BooleanType()), T.StructField("ratio", T.DoubleType()),
        T.StructField("pair", T.ArrayType(T.IntegerType())),
        T.StructField("st", T.StructType([T.StructField("x", T.IntegerType())])),
        T.StructField("m", T.MapType(T.StringType(), T.IntegerType())),
        T.StructField("delay", T.DoubleType()), T.StructField("key", T.StringType())])
    return spark.createDataFrame([_typed_row(i) for i in range(n)], schema).repartition(2)


def _typed_row(i: int) -> tuple[Any, ...]:
    text = None if i % 7 == 0 else 'n°%d "q" \\ \n\t é %s' % (i, "x" * (i % 3))
    return (i, text, i % 2 == 0, i / 4, [i, i + 1], {"x": i}, {"k": i}, float(i % 50) + 0.25,
            None if i % 5 == 0 else "order-%d" % i)


def _redis_entries(queue: str, job_ids: list[str]) -> tuple[list[Any], list[Any]]:
    from django_delayq.core.connection import get_engine

    engine = get_engine()
    keys = engine.keys(queue)
    pipe = engine.client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.zscore(keys.pending, job_id)
    scores = pipe.execute()
    for job_id in job_ids:
        pipe.hget(keys.jobs, job_id)
    return scores, pipe.execute()


def test_every_row_lands_with_its_values(spark: Any, spark_delayq: Any) -> None:
    """Known answers, row by row: args/kwargs of every JSON type (strings that need
    escaping, nulls, nested values), run_at, key-derived ids, and the Redis entry."""
    import json

    from django_delayq.core import ids
    from django_delayq.engine.envelope import Envelope
    from django_delayq.spark import schedule_dataframe

    n = 1300  # batch_size 500: several transactions per partition
    count = schedule_dataframe(
        _typed_frame(spark, n), ADD, delay_col="delay", args_cols=["id", "s", "flag", "ratio"],
        kwargs_cols=["pair", "st", "m"], key_col="key", max_attempts=3, backoff=[5, 60],
        settings_module=SETTINGS, batch_size=500)
    assert count == n
    jobs = {job.args[0]: job for job in Job.objects.all()}
    assert sorted(jobs) == list(range(n))
    scores, envelopes = _redis_entries("default", [jobs[i].id for i in range(n)])
    for i in range(n):
        _, text, flag, ratio, pair, st, m, delay, key = _typed_row(i)
        job = jobs[i]
        assert job.args == [i, text, flag, ratio]
        assert job.kwargs == {"pair": pair, "st": st, "m": m}
        assert (job.key, job.max_attempts, job.backoff, job.status) == (key, 3, [5, 60],
                                                                      "scheduled")
        assert job.run_at - job.created_at == timedelta(seconds=delay)
        if key is not None:
            assert job.id == ids.id_for_key("default", key)
        due_ms = job.run_at.timestamp() * 1000
        assert scores[i] is not None and abs(scores[i] - due_ms) < 10_000
        if envelopes[i] is not None:  # the payload may live only in the audit row
            env = Envelope.decode(envelopes[i])
            assert (env.path, env.args, env.kwargs) == (ADD, job.args, job.kwargs)
            assert json.loads(envelopes[i])[3:] == [3, [5, 60]]


def test_at_column_gives_exact_redis_scores(spark: Any, spark_delayq: Any) -> None:
    from pyspark.sql import functions as F

    from django_delayq.core.connection import get_engine
    from django_delayq.spark import schedule_dataframe
    from tests.spark.conftest import SPARK_PREFIX

    base = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    df = _frame(spark, 20).withColumn(
        "due", F.when(F.col("id") == 3, None).otherwise(
            F.timestamp_micros(F.lit(int(base.timestamp() * 1e6)) + F.col("id") * 1_000_001)))
    with pytest.raises(Exception, match=r"at_col 'due' is null \(the DataFrame row due=None, "
                                        r"a=3, b=7\)"):
        schedule_dataframe(df, ADD, at_col="due", args_cols=["a", "b"], settings_module=SETTINGS)
    Job.objects.all().delete()  # the other partition may have scheduled its rows, or not
    for key in get_engine().client.scan_iter(match="*%s*" % SPARK_PREFIX):
        get_engine().client.delete(key)
    schedule_dataframe(df, ADD, at_col="due", args_cols=["a", "b"], settings_module=SETTINGS,
                       null_when="now")
    jobs = sorted(Job.objects.all(), key=lambda job: job.args[0])
    scores, _ = _redis_entries("default", [job.id for job in jobs])
    for job, score in zip(jobs, scores):
        i = job.args[0]
        if i == 3:  # a null due time: due now
            assert abs(job.run_at - job.created_at) < timedelta(seconds=1)
            continue
        due = base + timedelta(microseconds=i * 1_000_001)
        assert job.run_at == due
        assert score == (int(base.timestamp() * 1e6) + i * 1_000_001) // 1000


def test_replay_with_keys_keeps_the_first_jobs(spark: Any, spark_delayq: Any) -> None:
    """A retried task (or the whole call run again) adds nothing, and a job scheduled
    earlier with the same key keeps its own values."""
    from django_delayq import schedule
    from django_delayq.core.connection import get_engine
    from django_delayq.spark import schedule_dataframe

    first = schedule(ADD, 100, 200, key="order-5", delay=600)
    keys = get_engine().keys("default")
    before = get_engine().client.zscore(keys.pending, first.id)
    assert before is not None
    df = _frame(spark, 400)
    for _ in range(2):
        count = schedule_dataframe(df, ADD, args_cols=["a", "b"], key_col="key",
                                   settings_module=SETTINGS, batch_size=150)
        assert count == 400
        assert Job.objects.count() == 400 and _pending() == 400
    assert Job.objects.get(pk=first.id).args == [100, 200]
    assert get_engine().client.zscore(keys.pending, first.id) == before  # due in 600 s, not now


@pytest.mark.parametrize(("column", "message"), [
    (lambda F: F.lit(float("nan")), r"args\[1\] \(column 'bad'\) = nan \(not finite"),
    (lambda F: F.array(F.lit(1.0), F.lit(float("inf"))), r"args\[1\] \(column 'bad'\)\[1\] = inf"),
    # a NUL in a string, refused as schedule() refuses it on every database (PostgreSQL's
    # COPY failed naming neither column nor row; SQLite stored it)
    (lambda F: F.concat(F.lit("a\x00"), F.col("id")),
     r"args\[1\] \(column 'bad'\) = 'a\\x00\d' \(a NUL character, which PostgreSQL cannot "
     r"store: refused on every database\) \(the DataFrame row a=\d, bad='a\\x00\d'\)"),
    (lambda F: F.array(F.lit("x"), F.lit("\x00")),
     r"args\[1\] \(column 'bad'\)\[1\] = '\\x00' \(a NUL character"),
    (lambda F: F.create_map(F.lit("k\x00"), F.lit(1)),
     r"args\[1\] \(column 'bad'\) has the key 'k\\x00' \(a NUL character"),
])
def test_bad_values_fail_naming_the_value(spark: Any, spark_delayq: Any, column: Any,
                                          message: str) -> None:
    from pyspark.sql import functions as F

    from django_delayq.spark import schedule_dataframe

    df = _frame(spark, 5).coalesce(1).withColumn("bad", column(F))
    with pytest.raises(Exception, match=message):
        schedule_dataframe(df, ADD, args_cols=["a", "bad"], settings_module=SETTINGS)
    assert not Job.objects.exists() and _pending() == 0


def test_bad_delays_keys_and_types_fail_naming_them(spark: Any, spark_delayq: Any) -> None:
    from pyspark.sql import functions as F

    from django_delayq.spark import schedule_dataframe

    df = _frame(spark, 5).coalesce(1)
    with pytest.raises(Exception, match=r"delay_col 'delay': delay must be >= 0, got -5.0 "
                                        r"\(the DataFrame row with key = 'order-\d+'\)"):
        schedule_dataframe(df.withColumn("delay", F.lit(-5.0)), ADD, delay_col="delay",
                           key_col="key", settings_module=SETTINGS)
    with pytest.raises(Exception, match="key_col 'key': key must be a non-empty string, not ''"):
        schedule_dataframe(df.withColumn("key", F.lit("")), ADD, key_col="key",
                           settings_module=SETTINGS)
    with pytest.raises(Exception, match=r"key_col 'key': key 'o\\x00\d' contains a NUL "
                                        r"character, which PostgreSQL cannot store: refused "
                                        r"on every database \(the DataFrame row with key = "):
        schedule_dataframe(df.withColumn("key", F.concat(F.lit("o\x00"), F.col("id"))), ADD,
                           key_col="key", settings_module=SETTINGS)
    with pytest.raises(InvalidJob, match="kwargs_cols: column 'price' has type decimal"):
        schedule_dataframe(df.withColumn("price", F.lit(1.5).cast("decimal(10,2)")), ADD,
                           kwargs_cols=["price"], settings_module=SETTINGS)
    assert not Job.objects.exists() and _pending() == 0


def test_scheduled_rows_run_with_their_arguments(spark: Any, spark_delayq: Any) -> None:
    """End to end: Redis holds the ids, the worker loads each payload from its row."""
    from django.utils import timezone
    from pyspark.sql import functions as F

    from django_delayq.spark import schedule_dataframe
    from django_delayq.testing import run_due_jobs

    df = _frame(spark, 40).withColumn("delay", (F.col("id") % 3).cast("double"))
    schedule_dataframe(df, ADD, delay_col="delay", args_cols=["a", "b"], key_col="key",
                       settings_module=SETTINGS)
    assert run_due_jobs(["default"], now=timezone.now() + timedelta(minutes=1)) == 40
    done = {job.args[0]: job for job in Job.objects.all()}
    assert sorted(done) == list(range(40))
    assert all((job.status, job.result) == ("succeeded", i + 7) for i, job in done.items())

