"""``schedule_dataframe``: one delayed job per row of a Spark DataFrame.

Each partition runs in an executor: it sets Django up there (the driver's
``DJANGO_SETTINGS_MODULE`` and ``sys.path`` travel in the closure), turns Arrow
batches into ``JobSpec`` s and calls ``api.schedule_many`` per ``batch_size`` rows:
one bulk insert of audit rows and one Lua call per batch. With ``key_col`` the job id
derives from the key, so a Spark task that is retried (or a job run twice) skips the
rows it already scheduled. The per-partition counts are summed on the driver, so an
error in any executor fails the call there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django_delayq.exceptions import InvalidJob

DEFAULT_BATCH = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Everything an executor needs; pickled into the closure."""

    fn_path: str
    settings_module: str
    sys_path: tuple[str, ...]
    queue: str | None
    max_attempts: int | None
    backoff: Any
    batch_size: int
    when: str | None  # "at" | "delay" | None
    has_key: bool
    n_args: int
    kwargs_names: tuple[str, ...]


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


def _at_expr(df: Any, col: str) -> Any:
    """Due time as epoch microseconds: from a timestamp, or from epoch seconds."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    kind = df.schema[col].dataType
    if isinstance(kind, (T.TimestampType, T.TimestampNTZType)):
        return F.unix_micros(F.col(col).cast("timestamp"))
    if isinstance(kind, T.NumericType):
        return (F.col(col).cast("double") * 1e6).cast("long")
    raise InvalidJob("at_col %r has type %s; it must be a timestamp or epoch seconds"
                     % (col, kind.simpleString()))


def _delay_expr(df: Any, col: str) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

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
    """Reject a bad callable, queue, attempts or backoff before any executor starts."""
    from django.apps import apps

    if not apps.ready:
        return
    from django_delayq.api import schedule_many

    schedule_many(plan.fn_path, [], queue=plan.queue, max_attempts=plan.max_attempts,
                  backoff=plan.backoff)


def schedule_dataframe(
    df: Any, fn: str, *, at_col: str | None = None, delay_col: str | None = None,
    args_cols: Sequence[str] = (), kwargs_cols: Sequence[str] = (), queue: str | None = None,
    key_col: str | None = None, max_attempts: int | None = None, backoff: Any = None,
    settings_module: str | None = None, batch_size: int = DEFAULT_BATCH,
) -> int:
    """Schedule ``fn(*args_cols, **kwargs_cols)`` once per row; return the number of rows.

    ``at_col``: a timestamp (or epoch seconds) column; ``delay_col``: seconds from now;
    neither: due now. Null keys are not idempotent. Column values must be JSON types
    (cast decimals and dates first). Rows whose key was already scheduled are counted
    but not scheduled again.
    """
    if not isinstance(fn, str):
        fn = "%s.%s" % (fn.__module__, fn.__qualname__)
    _check_columns(df, at_col, delay_col, key_col, args_cols, kwargs_cols)
    if batch_size <= 0:
        raise InvalidJob("batch_size must be > 0, not %r" % (batch_size,))
    plan = Plan(fn_path=fn, settings_module=_settings_module(settings_module),
                sys_path=tuple(p for p in sys.path if p), queue=queue,
                max_attempts=max_attempts, backoff=backoff, batch_size=batch_size,
                when="at" if at_col else ("delay" if delay_col else None),
                has_key=key_col is not None, n_args=len(args_cols),
                kwargs_names=tuple(kwargs_cols))
    _validate_on_driver(plan)
    from pyspark.sql import functions as F

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

    fields = {name: getattr(plan, name) for name in Plan.__dataclass_fields__}
    path = plan.sys_path

    def run(names: tuple[str, ...], rows: Iterator[Any]) -> Iterator[int]:  # pickled by value
        import sys

        for entry in reversed(path):  # before importing django_delayq in the executor
            if entry not in sys.path:
                sys.path.insert(0, entry)
        from django_delayq.spark.bulk import Plan, run_partition

        return run_partition(Plan(**fields), names, rows)

    selected = df.select(*cols)
    names = tuple(selected.columns)
    return int(selected.rdd.mapPartitions(lambda rows: run(names, rows)).sum())


def setup_django(plan: Plan) -> None:
    """Set Django up in this executor process with the driver's settings module."""
    os.environ["DJANGO_SETTINGS_MODULE"] = plan.settings_module
    from django.apps import apps

    if not apps.ready:
        import django

        django.setup()
        return
    from django.conf import settings

    if settings.SETTINGS_MODULE != plan.settings_module:
        raise InvalidJob("this Spark Python worker already runs Django with %r, not %r"
                         % (settings.SETTINGS_MODULE, plan.settings_module))


def _plain(value: Any) -> Any:
    """Spark struct values arrive as ``Row`` s: make them dicts (nested too)."""
    if hasattr(value, "asDict"):
        return value.asDict(recursive=True)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _spec(plan: Plan, index: dict[str, int], row: Sequence[Any], spec_cls: Any) -> Any:
    when = row[index["_when"]] if "_when" in index else None
    at = delay = None
    if when is not None and plan.when == "at":
        at = datetime.fromtimestamp(when / 1e6, tz=UTC)
    elif when is not None:
        delay = when
    args = [_plain(row[index["_a%d" % i]]) for i in range(plan.n_args)]
    kwargs = {name: _plain(row[index["_k%d" % i]]) for i, name in enumerate(plan.kwargs_names)}
    key = row[index["_key"]] if "_key" in index else None
    return spec_cls(args=args, kwargs=kwargs, at=at, delay=delay, key=key)


def run_partition(plan: Plan, names: Sequence[str], rows: Iterator[Any]) -> Iterator[int]:
    """Schedule one partition's rows, ``plan.batch_size`` per ``schedule_many`` call."""
    setup_django(plan)
    from django_delayq.api import JobSpec, schedule_many

    index = {name: i for i, name in enumerate(names)}
    done = 0
    chunk: list[Any] = []
    for row in rows:
        chunk.append(_spec(plan, index, row, JobSpec))
        if len(chunk) >= plan.batch_size:
            done += _flush(plan, chunk, schedule_many)
            chunk = []
    if chunk:
        done += _flush(plan, chunk, schedule_many)
    yield done


def _flush(plan: Plan, chunk: list[Any], schedule_many: Any) -> int:
    return len(schedule_many(plan.fn_path, chunk, queue=plan.queue,
                             max_attempts=plan.max_attempts, backoff=plan.backoff,
                             batch_size=plan.batch_size))
