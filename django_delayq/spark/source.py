"""Where the report reads jobs and attempts from: the Parquet export, or PostgreSQL over JDBC.

Both give one row per job id: the export is append-only, so a job exported again
after a change appears twice, and only the version read last (``read_at``, then
``updated_at``) is kept. Attempt rows never change; a copy read again is the same row,
and one per id is kept. An export directory without the marker
``preflight.ATTEMPTS_MARKER`` (begun before ``delayq_export`` wrote attempt rows) has no
complete attempt rows: ``read_attempts`` says so with None, and the report has no
failed-attempt figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django_delayq.spark.preflight import (
    ATTEMPTS_DIR,
    ATTEMPTS_MARKER,
    JOBS_DIR,
    export_root,
    is_url,
    jobs_dir,
)

REPORT_COLUMNS = ("id", "queue", "callable_path", "status", "attempts", "last_error",
                  "run_at", "created_at", "updated_at", "started_at", "finished_at",
                  "error_type", "read_at")
# absent from exports made before these columns existed, and from JDBC reads
OPTIONAL = frozenset({"error_type", "read_at"})
TIMESTAMPS = ("run_at", "created_at", "updated_at", "started_at", "finished_at", "read_at")
DEFAULT_TABLE = "django_delayq_job"
# what the report reads of an attempt row (``JobAttempt``); error_type is null in files
# written before the column existed
ATTEMPT_SCHEMA = "id bigint, job_id string, error_type string, error string"
DEFAULT_ATTEMPT_TABLE = "django_delayq_jobattempt"


def latest_versions(df: Any) -> Any:
    """Keep one row per ``id``: the one read last (``read_at``: a later read saw every
    commit an earlier one saw), then the greatest ``updated_at``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    newest = Window.partitionBy("id").orderBy(F.col("read_at").desc_nulls_last(),
                                               F.col("updated_at").desc_nulls_last())
    return (df.withColumn("_v", F.row_number().over(newest))
            .filter(F.col("_v") == 1).drop("_v"))


def normalize(df: Any) -> Any:
    """The report's columns with the report's types (JDBC drivers vary)."""
    from pyspark.sql import functions as F

    missing = [c for c in REPORT_COLUMNS if c not in df.columns and c not in OPTIONAL]
    if missing:
        raise ValueError("audit data lacks column(s) %s; found %s" % (missing, df.columns))
    cols = []
    for name in REPORT_COLUMNS:
        col = F.col(name) if name in df.columns else F.lit(None)
        if name in TIMESTAMPS:
            col = col.cast("timestamp")
        elif name == "attempts":
            col = col.cast("int")
        else:
            col = col.cast("string")
        cols.append(col.alias(name))
    return df.select(*cols)


REPORT_SCHEMA = ", ".join(
    "%s %s" % (c, "timestamp" if c in TIMESTAMPS else ("int" if c == "attempts" else "string"))
    for c in REPORT_COLUMNS)


def _job_files(path: Path) -> bool:
    """Whether ``path`` holds a published Parquet file (not a dot- or underscore-name,
    which Spark skips: files still being written, state and marker files)."""
    for found in path.rglob("*.parquet"):
        if not any(part[0] in "._" for part in found.relative_to(path).parts):
            return True
    return False


def read_parquet(spark: Any, root: Path | str) -> Any:
    """The exported jobs under ``root``. A URL (``s3a://``, ``hdfs://``) goes to Spark as
    it is; a local directory without job files (an export that found no rows yet) is an
    empty frame, so the report says "0 jobs" instead of failing to infer a schema; a
    missing one is a FileNotFoundError (``preflight.jobs_dir``)."""
    if is_url(root):
        text = str(root).rstrip("/") + "/" + JOBS_DIR
    else:
        path = jobs_dir(root)
        if not _job_files(path):
            return spark.createDataFrame([], REPORT_SCHEMA)
        text = str(path)
    # mergeSchema: files written before a column existed (error_type, read_at) and after
    # it are read with it, null in the older ones, whichever file Spark opens first
    return spark.read.option("basePath", text).option("mergeSchema", "true").parquet(text)


def read_jdbc(spark: Any, url: str, *, table: str = DEFAULT_TABLE,
              properties: Mapping[str, str | None] | None = None) -> Any:
    """Read the audit table over JDBC (the driver jar must be on ``spark.jars``)."""
    reader = spark.read.format("jdbc").option("url", url).option("dbtable", table)
    reader = reader.option("fetchsize", "10000")
    for key, value in (properties or {}).items():
        if value is not None:
            reader = reader.option(key, value)
    return reader.load()


def read_jobs(spark: Any, root: Path | str | None = None, *, jdbc_url: str | None = None,
              jdbc_table: str = DEFAULT_TABLE,
              jdbc_properties: Mapping[str, str | None] | None = None) -> Any:
    """One row per job, from ``root`` (Parquet) or from ``jdbc_url``."""
    if jdbc_url:
        raw = read_jdbc(spark, jdbc_url, table=jdbc_table, properties=jdbc_properties)
    elif root is not None:
        raw = read_parquet(spark, root)
    else:
        raise ValueError("read_jobs needs an export directory or a JDBC URL")
    return latest_versions(normalize(raw))


def attempts_complete(spark: Any, root: Path | str) -> bool:
    """Whether every job row under ``root`` has its attempt rows there (the marker)."""
    if not is_url(root):
        return (export_root(root) / ATTEMPTS_MARKER).is_file()
    from pyspark.errors import AnalysisException

    try:  # lists the path only: no Spark job
        spark.read.text(str(root).rstrip("/") + "/" + ATTEMPTS_MARKER)
    except AnalysisException:
        return False
    return True


def _attempt_files(spark: Any, root: Path | str) -> Any:
    """The attempt files under ``root`` with the report's columns; none is an empty frame."""
    reader = spark.read.schema(ATTEMPT_SCHEMA)  # also: no schema to infer from no files
    if not is_url(root):
        path = export_root(root) / ATTEMPTS_DIR
        if not path.is_dir():
            return spark.createDataFrame([], ATTEMPT_SCHEMA)
        return reader.parquet(str(path))
    from pyspark.errors import AnalysisException

    try:
        return reader.parquet(str(root).rstrip("/") + "/" + ATTEMPTS_DIR)
    except AnalysisException:  # no attempts directory: none was ever written
        return spark.createDataFrame([], ATTEMPT_SCHEMA)


def one_per_attempt(df: Any) -> Any:
    """The report's attempt columns, one row per ``id`` (copies of an attempt are the same
    row; of copies that differ, a redacted and a plain one, the same one is always kept)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    missing = [c for c in ("id", "job_id") if c not in df.columns]
    if missing:
        raise ValueError("attempt data lacks column(s) %s; found %s" % (missing, df.columns))
    cols = [F.col(c) if c in df.columns else F.lit(None) for c in ("error_type", "error")]
    df = df.select(F.col("id").cast("long").alias("id"),
                   F.col("job_id").cast("string").alias("job_id"),
                   cols[0].cast("string").alias("error_type"),
                   cols[1].cast("string").alias("error"))
    first = Window.partitionBy("id").orderBy(F.col("error").asc_nulls_last(),
                                             F.col("error_type").asc_nulls_last())
    return df.withColumn("_v", F.row_number().over(first)).filter(F.col("_v") == 1).drop("_v")


def read_attempts(spark: Any, root: Path | str | None = None, *, jdbc_url: str | None = None,
                  jdbc_table: str = DEFAULT_ATTEMPT_TABLE,
                  jdbc_properties: Mapping[str, str | None] | None = None) -> Any | None:
    """One row per attempt (``id``, ``job_id``, ``error_type``, ``error``) from ``root``
    (Parquet) or ``jdbc_url``; None when ``root`` has no complete attempt rows."""
    if jdbc_url:
        raw = read_jdbc(spark, jdbc_url, table=jdbc_table, properties=jdbc_properties)
    elif root is not None:
        if not attempts_complete(spark, root):
            return None
        raw = _attempt_files(spark, root)
    else:
        raise ValueError("read_attempts needs an export directory or a JDBC URL")
    return one_per_attempt(raw)
