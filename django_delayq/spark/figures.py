"""The report's numbers, computed with Spark and collected as plain Python values.

Every job is counted at three levels: its (queue, callable), its queue (callable
``"*"``) and overall (queue ``"*"``, callable ``"*"``), by exploding each row into its
three labels; every metric is then one ``groupBy(queue, callable)``.

Definitions (docs/pipeline.md, "Lateness", is the reference):
- lateness_ms = start of an attempt - due time of that same attempt. The audit row holds
  the attempt it last started (``started_at``) and, while it is running and once it has
  succeeded or died, that attempt's due time (``run_at``). A ``retrying`` row has already
  moved ``run_at`` to the next attempt's due time while ``started_at`` is still the failed
  attempt's, and a cancelled row may be either: neither is measured (null), so a job that
  ran once counts its first attempt's lateness and a retried job its last attempt's;
- duration_ms = finished_at - started_at of succeeded, dead and cancelled rows (an
  expired job never ran: its ``started_at``, if any, is an earlier attempt's);
- percentiles are exact (Spark's ``percentile``, linear interpolation between the two
  nearest ranks, as numpy's default), rounded to the microsecond;
- success_rate = succeeded / (succeeded + dead); cancelled and expired jobs are neither;
- throughput: finished jobs (succeeded, dead, cancelled, expired) per minute, the mean
  over the wall-clock minutes from the first finish's to the last finish's (both
  counted whole, empty ones too) and the peak of any one of them, so mean <= peak;
- errors: per exception type, the failed attempts that raised it (attempt rows, whatever
  became of their job: later succeeded, retrying, cancelled or dead), the jobs that ended
  dead with it, and the jobs whose last failure it was (a job row keeps only its last).
  Without attempt rows (an export begun before they were exported) the first is null,
  never a count of jobs. An expiry is a status, not an error type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Window
from pyspark.sql import functions as F

from django_delayq.spark.constants import (
    BUCKETS_SECONDS,
    DURATION_STATUSES,
    FINAL,
    LATENESS_STATUSES,
    MAX_POINTS,
    NOT_ERRORS,
    PERCENTILES,
    STATUSES,
    TOP_ERRORS,
    UNKNOWN_TYPE,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

ALL = "*"


def levels(df: DataFrame) -> DataFrame:
    """Each row three times: (queue, callable), (queue, "*"), ("*", "*")."""
    labels = F.array(
        F.struct(F.col("queue").alias("q"), F.col("callable_path").alias("c")),
        F.struct(F.col("queue").alias("q"), F.lit(ALL).alias("c")),
        F.struct(F.lit(ALL).alias("q"), F.lit(ALL).alias("c")),
    )
    return (df.withColumn("_l", F.explode(labels))
            .withColumn("queue", F.col("_l.q")).withColumn("callable", F.col("_l.c"))
            .drop("_l", "callable_path"))


def with_levels(df: DataFrame) -> DataFrame:
    """Each job three times (``levels``), with its lateness and run duration."""
    return levels(df.withColumn("lateness_ms", lateness_ms())
                  .withColumn("duration_ms", duration_ms()))


def attempt_levels(attempts: DataFrame, jobs: DataFrame) -> DataFrame:
    """Each attempt row three times, at its job's levels; an attempt whose job is not in
    the data is left out (``without_job`` counts them)."""
    owners = jobs.select(F.col("id").alias("job_id"), "queue", "callable_path")
    return levels(attempts.join(owners, "job_id"))


def without_job(attempts: DataFrame, jobs: DataFrame) -> int:
    """The attempt rows whose job is not in the data (a table read over JDBC while jobs
    were being added, jobs filtered out before the report): counted at no level."""
    owners = jobs.select(F.col("id").alias("job_id"))
    return int(attempts.join(owners, "job_id", "left_anti").count())


def lateness_ms() -> Column:
    """Start minus due time of the attempt the row describes, in ms; null when the row's
    ``run_at`` is not that attempt's due time (see the module docstring)."""
    measured = F.col("status").isin(*LATENESS_STATUSES) & F.col("started_at").isNotNull()
    late = (F.unix_micros("started_at") - F.unix_micros("run_at")) / 1000.0
    return F.when(measured, late)


def duration_ms() -> Column:
    """Finish minus start of the attempt the row describes, in ms; null for rows whose
    ``finished_at`` does not end that attempt (expired: it never started)."""
    run = (F.unix_micros("finished_at") - F.unix_micros("started_at")) / 1000.0
    return F.when(F.col("status").isin(*DURATION_STATUSES), run)


def _pct(col: str, name: str) -> list[Column]:
    fractions = ", ".join(str(p) for p in PERCENTILES)
    return [F.expr("percentile(%s, array(%s))" % (col, fractions)).alias(name + "_p"),
            F.max(col).alias(name + "_max"), F.avg(col).alias(name + "_mean")]


def summary_frame(lv: DataFrame) -> DataFrame:
    counts = [F.sum((F.col("status") == s).cast("long")).alias("n_" + s) for s in STATUSES]
    finished = F.col("status").isin(*FINAL) & F.col("finished_at").isNotNull()
    return lv.groupBy("queue", "callable").agg(
        F.count(F.lit(1)).alias("jobs"), *counts,
        *_pct("lateness_ms", "lateness"), *_pct("duration_ms", "duration"),
        F.sum(finished.cast("long")).alias("finished"),
        F.min(F.when(finished, F.unix_micros("finished_at"))).alias("first_finished_us"),
        F.max(F.when(finished, F.unix_micros("finished_at"))).alias("last_finished_us"),
    )


def peak_frame(lv: DataFrame) -> DataFrame:
    minute = F.date_trunc("minute", F.col("finished_at"))
    per_minute = (lv.filter(F.col("status").isin(*FINAL) & F.col("finished_at").isNotNull())
                  .groupBy("queue", "callable", minute.alias("m")).count())
    return per_minute.groupBy("queue", "callable").agg(F.max("count").alias("peak"))


def attempts_frame(lv: DataFrame) -> DataFrame:
    return (lv.filter(F.col("status").isin(*FINAL))
            .groupBy("queue", "callable", "attempts").count())


# "Type: message" in rows written before error_type existed: a dotted class path, then a
# colon and a space (or the end). Never the text before any colon: that cuts inside
# timestamps ("expired at 2026-11-27T03:01:30...") and sentences.
LEGACY_TYPE = r"(?U)^\s*([^\W\d]\w*(?:\.[^\W\d]\w*)*):(?:\s|$)"


def error_kind(type_col: str = "error_type", message_col: str = "last_error") -> Column:
    """The exception class path (``type_col``), null for a row without an error. Rows read
    from data without the column (null: exports made before it existed, or with it
    excluded) fall back to the class path leading the message (``message_col``), else
    ``UNKNOWN_TYPE``. Never the message itself: messages carry ids, amounts and times,
    which would make every error unique."""
    message = F.coalesce(F.col(message_col), F.lit(""))
    legacy = F.regexp_extract(F.split(message, "\n").getItem(0), LEGACY_TYPE, 1)
    recorded = F.when(F.trim(F.col(type_col)) != "", F.col(type_col))
    unrecorded = (F.when(legacy != "", legacy)
                  .when(F.trim(message) != "", F.lit(UNKNOWN_TYPE)))
    return F.when(F.col(type_col).isNull(), unrecorded).otherwise(recorded)


def job_error_kind() -> Column:
    """A job row's error (``error_kind``); none for an expired row, whose status says it
    (``last_error`` only says when it expired)."""
    return F.when(~F.col("status").isin(*NOT_ERRORS), error_kind())


def _first_line(col: str) -> Column:
    return F.substring(F.split(F.col(col), "\n").getItem(0), 1, 200)


def _by_job(lv: DataFrame) -> DataFrame:
    return (lv.withColumn("_kind", job_error_kind()).filter(F.col("_kind").isNotNull())
            .groupBy("queue", "callable", F.col("_kind").alias("error"))
            .agg(F.count(F.lit(1)).alias("failed_jobs"),
                 F.sum((F.col("status") == "dead").cast("long")).alias("dead_jobs"),
                 F.min(_first_line("last_error")).alias("example")))


def _by_attempt(attempt_lv: DataFrame) -> DataFrame:
    return (attempt_lv.withColumn("_kind", error_kind("error_type", "error"))
            .filter(F.col("_kind").isNotNull())
            .groupBy("queue", "callable", F.col("_kind").alias("error"))
            .agg(F.count(F.lit(1)).alias("failed_attempts"),
                 F.min(_first_line("error")).alias("attempt_example")))


def error_counts(lv: DataFrame, attempt_lv: DataFrame | None) -> DataFrame:
    """Per level and error type: ``failed_attempts`` (attempt rows that raised it, whatever
    became of their job; null without attempt rows), ``dead_jobs`` (jobs that ended dead
    with it), ``failed_jobs`` (jobs whose last failure it was) and ``example`` (the
    smallest first line of its messages, 200 chars, so the report is reproducible)."""
    jobs = _by_job(lv)
    if attempt_lv is None:
        return jobs.withColumn("failed_attempts", F.lit(None).cast("long"))
    keys = ["queue", "callable", "error"]
    both = jobs.join(_by_attempt(attempt_lv), keys, "full_outer")
    return both.select(*keys, *[F.coalesce(F.col(c), F.lit(0)).alias(c) for c in (
        "failed_attempts", "dead_jobs", "failed_jobs")],
        F.least("example", "attempt_example").alias("example"))


def errors_frame(lv: DataFrame, attempt_lv: DataFrame | None = None,
                 top: int = TOP_ERRORS) -> DataFrame:
    """The most frequent error types per level (``error_counts``), top ``top``: by failed
    attempts, then failed jobs, then dead jobs (without attempt rows: failed jobs first)."""
    rank = Window.partitionBy("queue", "callable").orderBy(
        F.desc_nulls_last("failed_attempts"), F.desc("failed_jobs"), F.desc("dead_jobs"),
        F.asc("error"))
    return (error_counts(lv, attempt_lv).withColumn("rank", F.row_number().over(rank))
            .filter(F.col("rank") <= top))


def choose_bucket(span_seconds: float, max_points: int = MAX_POINTS) -> int:
    for bucket in BUCKETS_SECONDS:
        if span_seconds / bucket <= max_points:
            return bucket
    return BUCKETS_SECONDS[-1]


def _bucket(col: str, seconds: int) -> Column:
    """Start of the bucket, in epoch seconds (collected as int: no local-time conversion)."""
    return (F.floor(F.unix_seconds(F.col(col)) / seconds) * seconds).cast("long")


def series_frames(lv: DataFrame, seconds: int) -> tuple[DataFrame, DataFrame]:
    """Per queue (and overall) and bucket: lateness by start time; outcomes by finish time."""
    queues = lv.filter(F.col("callable") == ALL)
    started = (queues.filter(F.col("started_at").isNotNull())  # lateness: measured rows only
               .groupBy("queue", _bucket("started_at", seconds).alias("bucket"))
               .agg(F.count(F.lit(1)).alias("started"), *_pct("lateness_ms", "lateness")))
    fin = queues.filter(F.col("status").isin(*FINAL) & F.col("finished_at").isNotNull())
    finished = fin.groupBy("queue", _bucket("finished_at", seconds).alias("bucket")).agg(
        F.count(F.lit(1)).alias("finished"),
        *[F.sum((F.col("status") == s).cast("long")).alias(s) for s in FINAL],
        F.sum((F.col("attempts") > 1).cast("long")).alias("retried"),
    )
    return started, finished


def time_span_seconds(df: DataFrame) -> float:
    """Seconds between the first start or finish and the last one (0 when none)."""
    lo = F.least(F.min(F.unix_micros("started_at")), F.min(F.unix_micros("finished_at")))
    hi = F.greatest(F.max(F.unix_micros("started_at")), F.max(F.unix_micros("finished_at")))
    row = df.agg(lo.alias("lo"), hi.alias("hi")).first()
    if row is None or row["lo"] is None:
        return 0.0
    return float(row["hi"] - row["lo"]) / 1e6
