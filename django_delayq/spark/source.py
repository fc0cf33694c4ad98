"""Where the report reads jobs from: the Parquet export, or PostgreSQL over JDBC.

Both give one row per job id: the export is append-only, so a job exported again
after a change appears twice, and only the version read last (``read_at``, then
``updated_at``) is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django_delayq.spark.preflight import JOBS_DIR, is_url, jobs_dir

REPORT_COLUMNS = ("id", "queue", "callable_path", "status", "attempts", "last_error",
                  "run_at", "created_at", "updated_at", "started_at", "finished_at",
                  "error_type", "read_at")
# absent from exports made before these columns existed, and from JDBC reads
OPTIONAL = frozenset({"error_type", "read_at"})
TIMESTAMPS = ("run_at", "created_at", "updated_at", "started_at", "finished_at", "read_at")
DEFAULT_TABLE = "django_delayq_job"


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
