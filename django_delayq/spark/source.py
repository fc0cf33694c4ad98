"""Where the report reads jobs and attempts from: the Parquet export, or PostgreSQL over JDBC.

Both give one row per job id: the export is append-only, so a job exported again
after a change appears twice, and only the version read last (``read_at``, then
``updated_at``) is kept. Attempt rows never change; a copy read again is the same row,
and one per id is kept. An export directory without the marker
``preflight.ATTEMPTS_MARKER`` (begun before ``delayq_export`` wrote attempt rows) has no
complete attempt rows: ``read_attempts`` says so with None, and the report has no
failed-attempt figure.

Of an export directory only the files its records list are read (``records``: what
``delayq_export`` and ``delayq_prune --archive`` wrote there), and what is read is
checked against them: a listed file missing, rows missing from the listed files, a
marker that some record contradicts, or records of two databases make the report
refuse with one line (a ValueError) rather than show figures of data that is not what
was written. Ids are unique within one database, so one directory holds one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import Window
from pyspark.sql import functions as F

from django_delayq.spark import records
from django_delayq.spark.preflight import (
    ATTEMPTS_DIR,
    ATTEMPTS_MARKER,
    JOBS_DIR,
    RECORDS_DIR,
    export_root,
    is_url,
    jobs_dir,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession

REPORT_COLUMNS = ("id", "queue", "callable_path", "status", "attempts", "last_error",
                  "run_at", "created_at", "updated_at", "started_at", "finished_at",
                  "error_type", "read_at")
# absent from exports made before these columns existed, and from JDBC reads
OPTIONAL = frozenset({"error_type", "read_at"})
TIMESTAMPS = ("run_at", "created_at", "updated_at", "started_at", "finished_at", "read_at")
DEFAULT_TABLE = "django_delayq_job"
MAX_CAUSES = 20  # causes followed from a JDBC read's exception to the innermost
_PASSWORD = re.compile(r"(?i)(password\s*[=:]\s*)[^\s&;,)]+")
# what the report reads of an attempt row (``JobAttempt``); error_type is null in files
# written before the column existed
ATTEMPT_SCHEMA = "id bigint, job_id string, error_type string, error string"
DEFAULT_ATTEMPT_TABLE = "django_delayq_jobattempt"
# the driver class of a JDBC URL's database, when the caller names none
JDBC_DRIVERS = {"postgresql": "org.postgresql.Driver", "mysql": "com.mysql.cj.jdbc.Driver",
                "mariadb": "org.mariadb.jdbc.Driver", "sqlite": "org.sqlite.JDBC"}


def latest_versions(df: DataFrame) -> DataFrame:
    """Keep one row per ``id``: the one read last (``read_at``: a later read saw every
    commit an earlier one saw), then the greatest ``updated_at``."""
    newest = Window.partitionBy("id").orderBy(F.col("read_at").desc_nulls_last(),
                                               F.col("updated_at").desc_nulls_last())
    return (df.withColumn("_v", F.row_number().over(newest))
            .filter(F.col("_v") == 1).drop("_v"))


def normalize(df: DataFrame) -> DataFrame:
    """The report's columns with the report's types (JDBC drivers vary)."""
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


def _base(root: Path | str) -> str:
    """The export directory holding ``jobs/``, ``attempts/`` and the records."""
    return str(root).rstrip("/") if is_url(root) else str(export_root(root))


def _record_texts(spark: SparkSession, base: str) -> list[tuple[str, str]]:
    """The records under a URL, ``(name, text)``: Spark reads them (one file, one row)."""
    try:
        frame = spark.read.option("pathGlobFilter", "*.json").text(base + "/" + RECORDS_DIR,
                                                                   wholetext=True)
        rows = frame.select("_metadata.file_name", "value").collect()
    except AnalysisException:  # no records directory
        return []
    return [(row[0], row[1]) for row in rows]


def _url_listing(spark: SparkSession, base: str) -> list[str]:
    """The Parquet files under a URL's ``jobs/`` and ``attempts/``, as paths under it
    (``jobs/day=.../name.parquet``) where they sit where the writers put them; Spark lists
    them (``binaryFile`` without its content column reads no file)."""
    found = []
    for sub in (JOBS_DIR, ATTEMPTS_DIR):
        try:
            rows = (spark.read.format("binaryFile").option("pathGlobFilter", "*.parquet")
                    .option("recursiveFileLookup", "true").load(base + "/" + sub)
                    .select("path").collect())
        except AnalysisException:  # no such directory
            continue
        for row in rows:
            tail = "/".join(row[0].rsplit("/", 3)[-3:])
            found.append(tail if records.FILE_PATH.match(tail) else row[0])
    return found


def inventory(spark: SparkSession, root: Path | str) -> records.Inventory:
    """What the writers recorded in ``root`` and which Parquet files are there, checked
    (``records.usable``); a missing local directory is a FileNotFoundError."""
    base = _base(root)
    if is_url(root):
        texts, found = _record_texts(spark, base), _url_listing(spark, base)
    else:
        jobs_dir(root)
        texts, found = records.read_texts(Path(base)), records.listing(Path(base))
    return records.usable(records.inventory(texts, found, base), base)


def _listed(root: Path | str, paths: list[str], where: str) -> list[str]:
    """The full paths of the listed files; a local one that is not there is refused."""
    base = _base(root)
    if not is_url(root):
        missing = [p for p in paths if not (Path(base) / p).is_file()]
        if missing:
            raise ValueError("%s: %d file(s) its records list are not there (%s%s): restore "
                             "them, or export to a new directory" % (
                                 where, len(missing), ", ".join(missing[:3]),
                                 ", ..." if len(missing) > 3 else ""))
    return [base + "/" + p for p in paths]


def _read_listed(reader: DataFrameReader, paths: list[str], where: str) -> DataFrame:
    try:
        return reader.parquet(*paths)
    except AnalysisException as exc:  # a listed file not there (URLs), or not Parquet
        raise ValueError("%s: a file its records list cannot be read (%s): restore it, or "
                         "export to a new directory"
                         % (where, str(exc).strip().splitlines()[0])) from None


def _mismatch(where: str, what: str, read: object, recorded: object) -> ValueError:
    return ValueError("%s does not hold the %s its records list: read %s, recorded %s; "
                      "restore the files, or export to a new directory" % (where, what, read,
                                                                          recorded))


def read_parquet(spark: SparkSession, root: Path | str,
                 files: records.Inventory | None = None) -> DataFrame:
    """The exported jobs under ``root``: the job files its records list (``files``, read
    here unless given), checked against them. A URL (``s3a://``, ``hdfs://``) goes to
    Spark as it is; a directory without job files (an export that found no rows yet) is
    an empty frame, so the report says "0 jobs" instead of failing to infer a schema; a
    missing local one is a FileNotFoundError (``preflight.jobs_dir``)."""
    files = files or inventory(spark, root)
    where = "%s/%s" % (_base(root), JOBS_DIR)
    paths = _listed(root, sorted(files.jobs), where)
    if not paths:
        return spark.createDataFrame([], REPORT_SCHEMA)
    # mergeSchema: files written before a column existed (error_type, read_at) and after
    # it are read with it, null in the older ones, whichever file Spark opens first
    reader = spark.read.option("basePath", where).option("mergeSchema", "true")
    raw = _read_listed(reader, paths, where)
    rows = raw.count()
    if rows != files.job_rows:
        raise _mismatch(where, "job rows", rows, files.job_rows)
    return raw


def jdbc_driver(url: str) -> str | None:
    """The driver class of a JDBC URL's database (``jdbc:postgresql:...``), or None."""
    parts = url.split(":", 2)
    if len(parts) < 3 or parts[0].lower() != "jdbc":
        return None
    return JDBC_DRIVERS.get(parts[1].lower())


def _jdbc_error(exc: Exception, secrets: tuple[str, ...] = ()) -> str:
    """The JVM's exception of a failed JDBC read in one line (``java.sql.SQLException: No
    suitable driver``), not Py4J's call and stack, with its innermost cause (Spark's
    "Couldn't connect to the database" says neither which database nor why: the
    driver's ``PSQLException`` does), passwords redacted."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    cause = _innermost_cause(java if java is not None else getattr(exc, "_origin", None))
    if cause and cause not in line:
        line = "%s (cause: %s)" % (line, cause)
    return _redacted(line, secrets)


def _innermost_cause(java: Any) -> str | None:
    """The first line of the deepest ``getCause()`` of a Java exception, or None."""
    inner, depth = None, 0
    try:
        cause = None if java is None else java.getCause()
        while cause is not None and depth < MAX_CAUSES:
            inner, cause, depth = cause, cause.getCause(), depth + 1
        text = None if inner is None else str(inner.toString()).strip()
    except Exception:  # noqa: BLE001 - a JVM gone meanwhile: the line without it
        return None
    return text.splitlines()[0] if text else None


def _redacted(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` without a password: a ``password=...`` and each of ``secrets``."""
    text = _PASSWORD.sub(r"\1***", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def read_jdbc(spark: SparkSession, url: str, *, table: str = DEFAULT_TABLE,
              properties: Mapping[str, str | None] | None = None) -> DataFrame:
    """Read ``table`` over JDBC (the driver jar must be on ``spark.jars``). The driver
    class is ``properties["driver"]``, else the one of the URL's database
    (``JDBC_DRIVERS``): without it, Java's ``DriverManager`` does not see a driver that
    Spark loaded from ``spark.jars`` ("No suitable driver"). A read that fails (no driver,
    no connection, no table) is a ValueError in one line naming the table, the URL (up to
    its ``?``, which may carry a password) and the JVM's error."""
    from py4j.protocol import Py4JJavaError  # lazy: pyspark-client (Spark Connect) has no py4j

    options = {key: value for key, value in (properties or {}).items() if value is not None}
    if "driver" not in options and (driver := jdbc_driver(url)) is not None:
        options["driver"] = driver
    reader = spark.read.format("jdbc").option("url", url).option("dbtable", table)
    reader = reader.option("fetchsize", "10000")
    for key, value in options.items():
        reader = reader.option(key, value)
    secrets = (options.get("password", ""), url.split("?", 1)[1] if "?" in url else "")
    try:
        return reader.load()
    except (Py4JJavaError, PySparkException) as exc:
        raise ValueError("cannot read %s over JDBC from %s: %s (driver class %s; give the "
                         "driver's jar with --jdbc-jar and its class with --jdbc-driver)"
                         % (table, url.split("?", 1)[0], _jdbc_error(exc, secrets),
                            options.get("driver", "not given"))) from None


def read_jobs(spark: SparkSession, root: Path | str | None = None, *, jdbc_url: str | None = None,
              jdbc_table: str = DEFAULT_TABLE,
              jdbc_properties: Mapping[str, str | None] | None = None,
              files: records.Inventory | None = None) -> DataFrame:
    """One row per job, from ``root`` (Parquet: the files its records list, ``files``
    when given) or from ``jdbc_url``."""
    if jdbc_url:
        raw = read_jdbc(spark, jdbc_url, table=jdbc_table, properties=jdbc_properties)
    elif root is not None:
        raw = read_parquet(spark, root, files)
    else:
        raise ValueError("read_jobs needs an export directory or a JDBC URL")
    return latest_versions(normalize(raw))


def attempts_complete(spark: SparkSession, root: Path | str) -> bool:
    """Whether every job row under ``root`` has its attempt rows there (the marker)."""
    if not is_url(root):
        return (export_root(root) / ATTEMPTS_MARKER).is_file()

    try:  # lists the path only: no Spark job
        spark.read.text(str(root).rstrip("/") + "/" + ATTEMPTS_MARKER)
    except AnalysisException:
        return False
    return True


def _attempt_files(spark: SparkSession, root: Path | str, files: records.Inventory) -> DataFrame:
    """The attempt files the records of ``root`` list, with the report's columns, checked
    against the records (rows, highest id); none is an empty frame. A record that says its
    run did not write the attempt rows of its jobs contradicts the marker: refused."""
    where = "%s/%s" % (_base(root), ATTEMPTS_DIR)
    if files.incomplete:
        raise ValueError(
            "%s/%s says every job row there has its attempt rows, but %d of its file records "
            "say their run wrote none (%s): a directory begun before delayq_export wrote "
            "attempt rows, or a marker put there by hand; remove the marker, or export to a "
            "new directory" % (_base(root), ATTEMPTS_MARKER, len(files.incomplete),
                               ", ".join(files.incomplete[:3])))
    paths = _listed(root, sorted(files.attempts), where)
    if not paths:
        frame = spark.createDataFrame([], ATTEMPT_SCHEMA)
    else:
        reader = spark.read.schema(ATTEMPT_SCHEMA).option("basePath", where)
        frame = _read_listed(reader, paths, where)
    got = frame.agg(F.count(F.lit(1)).alias("rows"), F.max("id").alias("top")).first()
    assert got is not None  # an aggregate without grouping has one row
    read, recorded = (got["rows"], got["top"]), (files.attempt_rows, files.attempt_max_id)
    if read != recorded:
        raise _mismatch(where, "attempt rows", "%d (highest id %s)" % read,
                        "%d (highest id %s)" % recorded)
    return frame


def one_per_attempt(df: DataFrame) -> DataFrame:
    """The report's attempt columns, one row per ``id`` (copies of an attempt are the same
    row; of copies that differ, a redacted and a plain one, the same one is always kept)."""
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


def read_attempts(spark: SparkSession, root: Path | str | None = None, *,
                  jdbc_url: str | None = None, jdbc_table: str = DEFAULT_ATTEMPT_TABLE,
                  jdbc_properties: Mapping[str, str | None] | None = None,
                  files: records.Inventory | None = None) -> DataFrame | None:
    """One row per attempt (``id``, ``job_id``, ``error_type``, ``error``) from ``root``
    (Parquet: the attempt files its records list, ``files`` when given, checked against
    them) or ``jdbc_url``; None when ``root`` has no complete attempt rows (no marker)."""
    if jdbc_url:
        raw = read_jdbc(spark, jdbc_url, table=jdbc_table, properties=jdbc_properties)
    elif root is not None:
        if not attempts_complete(spark, root):
            return None
        raw = _attempt_files(spark, root, files or inventory(spark, root))
    else:
        raise ValueError("read_attempts needs an export directory or a JDBC URL")
    return one_per_attempt(raw)
