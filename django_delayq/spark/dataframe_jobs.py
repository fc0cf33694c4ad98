"""``schedule_dataframe``: one delayed job per row of a Spark DataFrame.

Each partition runs in an executor (``mapInArrow``): it sets Django up there (the
driver's ``DJANGO_SETTINGS_MODULE`` and ``sys.path`` travel in the closure) and turns
each Arrow batch, ``batch_size`` rows at a time, into column-wise job values
(``arrow_jobs``), one transaction of audit rows and then Redis (``sink``). With
``key_col`` the job id derives from the key, so a Spark task that is retried (or a job
run twice) skips the rows it already scheduled. A row without a key gets an id derived
from the call (``Plan.call_id``, drawn once on the driver), the partition, its position
there and its arguments (``batch_ids.ids_for_rows``): a retried task skips the rows its
failed attempt committed too. The per-partition counts are summed on the driver, so an
error in any executor fails the call there.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import django
import pyarrow as pa
from django.apps import apps
from django.conf import settings
from django.db import connections, router
from django.utils import timezone
from pyspark import TaskContext
from pyspark.sql import functions as F
from pyspark.sql import types as T

from django_delayq.core import validation
from django_delayq.core.conf import get_settings
from django_delayq.core.options import Checked, JobOptions
from django_delayq.exceptions import InvalidJob
from django_delayq.spark.arrow_jobs import Target

DEFAULT_BATCH = 10_000  # Spark's Arrow batches hold 10,000 rows by default


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Everything an executor needs; pickled into the closure."""

    fn_path: str
    settings_module: str
    sys_path: tuple[str, ...]
    options: JobOptions  # the call's: its queue and retries
    batch_size: int
    when: str | None  # "at" | "delay" | None
    has_key: bool
    n_args: int
    kwargs_names: tuple[str, ...]
    arg_names: tuple[str, ...]
    when_name: str | None
    key_name: str | None
    null_when: str
    call_id: str  # random, one per call: the ids of rows without a key derive from it
    call_ms: int


def _check_columns(df: Any, at_col: str | None, delay_col: str | None, key_col: str | None,
                   args_cols: Sequence[str], kwargs_cols: Sequence[str]) -> None:
    if at_col is not None and delay_col is not None:
        raise InvalidJob("pass at_col or delay_col, not both (at_col=%r, delay_col=%r)"
                         % (at_col, delay_col))
    named = [("at_col", at_col), ("delay_col", delay_col), ("key_col", key_col)]
    named += [("args_cols", c) for c in args_cols] + [("kwargs_cols", c) for c in kwargs_cols]
    for role, col in named:
        if col is not None and col not in df.columns:
            raise InvalidJob("%s: column %r is not in the DataFrame (columns: %s)"
                             % (role, col, ", ".join(df.columns)))
    for role, col in named[3:]:
        if why := _not_json(df.schema[col].dataType):
            raise InvalidJob("%s: column %r has type %s, which is not JSON (str, int, float, "
                             "bool, None, list, dict); cast it first, e.g. to string (%s)"
                             % (role, col, df.schema[col].dataType.simpleString(), why))


def _not_json(kind: Any) -> str | None:
    """Why a Spark type's values are not JSON, or None."""
    atoms = (T.StringType, T.VarcharType, T.CharType, T.BooleanType, T.NullType,
             T.IntegralType, T.FloatType, T.DoubleType)
    if isinstance(kind, atoms):
        return None
    if isinstance(kind, T.ArrayType):
        return _not_json(kind.elementType)
    if isinstance(kind, T.StructType):
        return next((why for f in kind.fields if (why := _not_json(f.dataType))), None)
    if isinstance(kind, T.MapType):
        if not isinstance(kind.keyType, T.StringType):
            return "map keys of type %s" % kind.keyType.simpleString()
        return _not_json(kind.valueType)
    return "values of type %s" % kind.simpleString()


def _at_expr(df: Any, col: str) -> Any:
    """Due time: epoch microseconds (long) of a timestamp, or epoch seconds (double) of a
    number, which the executor checks and converts (``arrow_jobs``): a cast to long here
    would fail on NaN or infinity inside Spark, naming neither column nor row."""
    kind = df.schema[col].dataType
    if isinstance(kind, (T.TimestampType, T.TimestampNTZType)):
        return F.unix_micros(F.col(col).cast("timestamp"))
    if isinstance(kind, T.NumericType):
        return F.col(col).cast("double")
    raise InvalidJob("at_col %r has type %s; it must be a timestamp or epoch seconds"
                     % (col, kind.simpleString()))


def _delay_expr(df: Any, col: str) -> Any:
    kind = df.schema[col].dataType
    if not isinstance(kind, T.NumericType):
        raise InvalidJob("delay_col %r has type %s; it must be a number of seconds"
                         % (col, kind.simpleString()))
    return F.col(col).cast("double")


def _settings_module(explicit: str | None) -> str:
    module = explicit or os.environ.get("DJANGO_SETTINGS_MODULE")
    if not module:
        raise InvalidJob("schedule_dataframe needs settings_module=... or DJANGO_SETTINGS_MODULE "
                         "set on the driver, so that executors can set Django up")
    return module


def _validate_on_driver(plan: Plan) -> None:
    """Reject a bad callable, queue, attempts or backoff before any executor starts, when
    the driver has set Django up. A driver that has not is left as it is: the settings
    module may need what only the executors have (an ``spark.executorEnv`` variable, an
    app on their ``PYTHONPATH``), and a failed ``django.setup()`` cannot be undone in this
    process. Each executor checks them then, before it writes a row."""
    if apps.ready:
        _check_options(plan)


def _check_options(plan: Plan) -> Checked:
    """The callable, queue, attempts and backoff checked and resolved as ``schedule()``
    resolves them (``JobOptions.check``: ``InvalidJob`` naming a bad one), scheduling
    nothing."""
    return plan.options.check(plan.fn_path)


def schedule_dataframe(
    df: Any, fn: str, *, at_col: str | None = None, delay_col: str | None = None,
    args_cols: Sequence[str] = (), kwargs_cols: Sequence[str] = (), queue: str | None = None,
    key_col: str | None = None, max_attempts: int | None = None, backoff: Any = None,
    settings_module: str | None = None, batch_size: int = DEFAULT_BATCH,
    null_when: str = "error",
) -> int:
    """Schedule ``fn(*args_cols, **kwargs_cols)`` once per row; return the number of rows.

    ``at_col``: a timestamp (or epoch seconds) column; ``delay_col``: seconds from now;
    neither: due now. A retried Spark task schedules none of its rows twice; rows without
    a key are idempotent within the call only (a new call schedules them again), and
    need the same rows in the same order on every attempt. Columns must hold JSON types
    (cast decimals and dates first). Rows whose key was already scheduled are counted
    but not scheduled again. ``batch_size``: rows per transaction (at most one Arrow
    batch, ``spark.sql.execution.arrow.maxRecordsPerBatch``). A null in ``at_col`` or
    ``delay_col`` is an error naming the row unless ``null_when="now"`` (due now).
    """
    if not isinstance(fn, str):
        fn = "%s.%s" % (fn.__module__, fn.__qualname__)
    _check_columns(df, at_col, delay_col, key_col, args_cols, kwargs_cols)
    validation.check_batch_size(batch_size)
    if null_when not in ("error", "now"):
        raise InvalidJob("null_when must be 'error' or 'now', not %r" % (null_when,))
    plan = Plan(fn_path=fn, settings_module=_settings_module(settings_module),
                sys_path=tuple(p for p in sys.path if p),
                options=JobOptions(queue=queue, max_attempts=max_attempts, backoff=backoff),
                batch_size=batch_size,
                when="at" if at_col else ("delay" if delay_col else None),
                has_key=key_col is not None, n_args=len(args_cols),
                kwargs_names=tuple(kwargs_cols), arg_names=tuple(args_cols),
                when_name=at_col or delay_col, key_name=key_col, null_when=null_when,
                call_id=os.urandom(16).hex(), call_ms=time.time_ns() // 1_000_000)
    _validate_on_driver(plan)
    fields = {name: getattr(plan, name) for name in Plan.__dataclass_fields__}
    path = plan.sys_path

    def run(batches: Iterator[Any]) -> Iterator[Any]:  # pickled by value
        import sys  # in the executor: run is pickled by value

        for entry in reversed(path):  # before importing django_delayq in the executor
            if entry not in sys.path:
                sys.path.insert(0, entry)
        from django_delayq.spark.dataframe_jobs import Plan, run_partition  # lazy: sys.path set

        return run_partition(Plan(**fields), batches)

    selected = df.select(*_columns(df, at_col, delay_col, key_col, args_cols, kwargs_cols))
    counts = selected.mapInArrow(run, "n long").collect()
    return sum(int(row[0]) for row in counts)


def _columns(df: Any, at_col: str | None, delay_col: str | None, key_col: str | None,
             args_cols: Sequence[str], kwargs_cols: Sequence[str]) -> list[Any]:
    """The executors' input: ``_when``, ``_key``, ``_a0..``, ``_k0..``."""
    cols = []
    if at_col is not None:
        cols.append(_at_expr(df, at_col).alias("_when"))
    elif delay_col is not None:
        cols.append(_delay_expr(df, delay_col).alias("_when"))
    if key_col is not None:
        cols.append(F.col(key_col).cast("string").alias("_key"))
    cols += [F.col(c).alias("_a%d" % i) for i, c in enumerate(args_cols)]
    cols += [F.col(c).alias("_k%d" % i) for i, c in enumerate(kwargs_cols)]
    if not cols:
        cols.append(F.lit(None).cast("string").alias("_none"))
    return cols


def setup_django(plan: Plan) -> None:
    """Set Django up in this executor process with the driver's settings module."""
    os.environ["DJANGO_SETTINGS_MODULE"] = plan.settings_module

    if not apps.ready:
        django.setup()
        return

    if plan.settings_module != settings.SETTINGS_MODULE:
        raise InvalidJob("this Spark Python worker already runs Django with %r, not %r"
                         % (settings.SETTINGS_MODULE, plan.settings_module))


def _target(plan: Plan) -> Any:
    """The call's constants: its options checked and given DELAYQ's defaults as
    ``schedule()`` does (``JobOptions.check``)."""
    return Target(job=_check_options(plan), max_payload=get_settings().max_payload_bytes,
                  when=plan.when, n_args=plan.n_args,
                  kwargs_names=plan.kwargs_names, arg_names=plan.arg_names,
                  when_name=plan.when_name, key_name=plan.key_name, null_when=plan.null_when,
                  call_id=plan.call_id, call_ms=plan.call_ms,
                  partition=task.partitionId() if (task := TaskContext.get()) else 0)


def run_partition(plan: Plan, batches: Iterator[Any]) -> Iterator[Any]:
    """Schedule one partition's Arrow batches, ``plan.batch_size`` rows per transaction."""
    setup_django(plan)

    from django_delayq.models import Job  # lazy: Django is set up just above
    from django_delayq.spark import arrow_jobs, sink  # lazy: sink imports core.api, so the models

    target, using = _target(plan), router.db_for_write(Job)
    done = 0
    try:
        with sink.Sink(target, using=using, batch_size=plan.batch_size) as out:
            for batch in batches:
                for start in range(0, batch.num_rows, plan.batch_size):
                    chunk = batch.slice(start, plan.batch_size)
                    now = timezone.now()
                    out.write(arrow_jobs.build(target, chunk, now, done), now)
                    done += chunk.num_rows
    finally:  # Spark keeps its Python workers: no idle connection left between tasks
        connections[using].close()
    yield pa.RecordBatch.from_pydict({"n": [done]}, schema=pa.schema([("n", pa.int64())]))
