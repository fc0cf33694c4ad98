"""An Arrow batch of a DataFrame -> the column-wise values of its jobs (no per-row objects).

The batch holds the columns ``schedule_dataframe`` selected: ``_when`` (for ``at_col``
epoch microseconds of a timestamp, or epoch seconds as float64 of a number; seconds for
``delay_col``), ``_key``, ``_a0..`` and ``_k0..``. Everything a job needs (id, run_at,
args/kwargs JSON, at_ms/delay_ms) is computed one column at a time with pyarrow or
numpy; the checks of ``schedule()`` run once per column, with the limits of
``validation`` (a due time from year 1 to 100 years from now; the payload size in UTF-8
bytes, like ``schedule_many``; Redis gets ids and due times only), and an error names the bad
value and its row. The checks find a bad value by its position in the batch; ``build``
then replaces that position (``row N of the batch``, meaningless to the caller, whose
DataFrame is cut into batches by Spark) by the row itself: its key when it has one, else
its values, under the DataFrame's column names.

A null due time (``at_col``) or delay (``delay_col``) is refused, naming the row, unless
the call says ``null_when="now"``: a null is more often a bug in the input (a failed
join, a missing date) than a wish to run the job at once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from django_delayq.core import option_checks, validation
from django_delayq.exceptions import InvalidJob
from django_delayq.spark import arrow_json, batch_ids

if TYPE_CHECKING:
    from django_delayq.core.options import Checked

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FIRST_US = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)  # year 1
_DAY_US = 86_400 * 1_000_000
_BATCH_ROW = re.compile(r"row (\d+) of the batch")
NULL_WHEN = ("error", "now")
MAX_ROW_TEXT = 300


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One call's constants, resolved in the executor (defaults from DELAYQ): ``job``, its
    options as ``JobOptions.check`` resolved them (``dataframe_jobs._target``)."""

    job: Checked
    max_payload: int
    when: str | None  # "at" | "delay" | None
    n_args: int
    kwargs_names: tuple[str, ...]
    arg_names: tuple[str, ...]  # the DataFrame's column names, for errors
    when_name: str | None = None
    key_name: str | None = None
    null_when: str = "error"  # "now": a null at_col/delay_col means due now
    call_id: str = ""  # one per schedule_dataframe call: the ids of rows without a key
    call_ms: int = 0  # the call's start, the time part of those ids
    partition: int = 0  # the Spark partition this executor task reads


@dataclass(frozen=True, slots=True, kw_only=True)
class JobColumns:
    """The jobs of one batch, column by column (row i of each is job i)."""

    ids: list[str]
    keys: pa.Array | None  # strings, null where the row has no key
    keyed: bool  # rows may exist already: ids from keys (or a retried task: sink)
    own_first: str | None  # the first id derived from the call, not a key (None: all keyed)
    args: pa.Array  # JSON text
    kwargs: pa.Array  # JSON text
    run_at_us: pa.Array  # int64 epoch microseconds
    at_ms: list[int | None] | None  # None: every job is due delay_ms after Redis' now
    delay_ms: list[int] | None  # None: all 0

    def keep(self, ids: set[str], inside: bool) -> JobColumns:
        """The jobs whose id is (``inside``) or is not in ``ids``."""
        mask = [(i in ids) is inside for i in self.ids]
        index = [i for i, ok in enumerate(mask) if ok]
        arrow = pa.array(mask, pa.bool_())
        pick = [v for v, ok in zip(self.ids, mask, strict=True) if ok]
        return replace(
            self, ids=pick, keys=None if self.keys is None else self.keys.filter(arrow),
            args=self.args.filter(arrow), kwargs=self.kwargs.filter(arrow),
            run_at_us=self.run_at_us.filter(arrow),
            at_ms=None if self.at_ms is None else [self.at_ms[i] for i in index],
            delay_ms=None if self.delay_ms is None else [self.delay_ms[i] for i in index])


def epoch_us(moment: datetime) -> int:
    if moment.tzinfo is None:  # USE_TZ = False: local time
        moment = moment.astimezone(UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _when(t: Target, batch: pa.RecordBatch, now_us: int) -> tuple[pa.Array, Any, Any]:
    """(run_at_us, at_ms, delay_ms) of every row."""
    n = batch.num_rows
    if t.when is None:
        return pa.array([now_us] * n, pa.int64()), None, None
    when = batch.column("_when")
    if when.null_count and t.null_when != "now":
        bad = int(pc.index(pc.is_null(when), True).as_py())
        raise InvalidJob("%s %r is null (row %d of the batch); give every row a value, or "
                         "pass null_when='now' to make a null mean due now"
                         % ("at_col" if t.when == "at" else "delay_col", t.when_name, bad))
    if t.when == "at":
        when = _at_micros(t, when, now_us)
        at_ms = pc.divide(when, 1000).to_pylist() if when.null_count < n else None
        return pc.fill_null(when, now_us) if when.null_count else when, at_ms, None
    seconds = pc.fill_null(when, 0.0) if when.null_count else when
    ok = pc.and_(pc.is_finite(seconds), pc.greater_equal(seconds, 0.0))
    if not pc.all(ok).as_py():
        bad = int(pc.index(ok, False).as_py())
        why = "delay must be >= 0, got %r" % seconds[bad].as_py()
        try:  # schedule()'s own words for a value that is not a number or not finite
            validation.delay_seconds(seconds[bad].as_py())
        except InvalidJob as exc:
            why = str(exc)
        raise InvalidJob("delay_col %r: %s (row %d of the batch)" % (t.when_name, why, bad))
    ok = pc.less_equal(seconds, float(validation.MAX_DELAY_SECONDS))
    if not pc.all(ok).as_py():
        bad = int(pc.index(ok, False).as_py())
        raise InvalidJob("delay_col %r: delay must be at most %d seconds (100 years), got %r "
                         "(row %d of the batch)" % (t.when_name, validation.MAX_DELAY_SECONDS,
                                                     seconds[bad].as_py(), bad))
    micros = pc.round(pc.multiply(seconds, 1e6), round_mode="half_to_even")
    run_at = pc.add(pc.cast(micros, pa.int64()), now_us)
    delay_ms = pc.cast(pc.floor(pc.multiply(seconds, 1000.0)), pa.int64())
    return run_at, None, delay_ms.to_pylist()


def _at_micros(t: Target, when: pa.Array, now_us: int) -> pa.Array:
    """An ``at_col`` as epoch microseconds, every value within ``schedule(at=...)``'s
    bounds (``validation.check_at``): from year 1 to at most ``MAX_DELAY_SECONDS`` (100
    years) from now. A timestamp column arrives as int64 microseconds; a numeric one as
    float64 epoch seconds, converted here (rounded to the microsecond, as
    ``datetime.fromtimestamp``), never by a Spark cast, which fails on NaN or infinity
    without naming the row."""
    seconds = pa.types.is_floating(when.type)
    latest = now_us + validation.MAX_DELAY_SECONDS * 1_000_000
    # integer bounds for int64 microseconds: a float one would make Arrow cast the column
    # to float64, which it refuses past 2**53 (years before 1685 or after 2255)
    low, high = (_FIRST_US / 1e6, latest / 1e6) if seconds else (_FIRST_US, latest)
    ok = pc.and_(pc.greater_equal(when, low), pc.less_equal(when, high))
    ok = pc.fill_null(ok, True)  # a null is due now (null_when="now"), checked before
    if not pc.all(ok).as_py():
        bad = int(pc.index(ok, False).as_py())
        raise _bad_at(t, when[bad].as_py(), seconds, bad)
    if not seconds:
        return when
    return pc.cast(pc.round(pc.multiply(when, 1e6), round_mode="half_to_even"), pa.int64())


def _check_wall_times(t: Target, given: pa.Array, run_at_us: pa.Array) -> None:
    """Without ``USE_TZ`` a row stores the local wall time (``validation.stored_time``):
    a time within a day of year 1 has none west of UTC, refused here as ``schedule()``
    refuses it, naming the row, not by an ``OverflowError`` in the sink."""
    near = pc.less(run_at_us, _FIRST_US + _DAY_US)
    if not pc.any(near).as_py():
        return
    for row in pc.indices_nonzero(near).to_pylist():
        moment = _EPOCH + timedelta(microseconds=run_at_us[row].as_py())
        try:
            moment.astimezone()
        except (OverflowError, ValueError, OSError) as exc:
            value = given[row].as_py()
            shown = ("%r (epoch seconds: %s)" % (value, moment.isoformat())
                     if pa.types.is_floating(given.type) else moment.isoformat())
            raise InvalidJob("at_col %r = %s has no wall time in the local TIME_ZONE (%s), the "
                             "naive time USE_TZ=False stores; use a time from year 1 to 9999 "
                             "there (row %d of the batch)" % (t.when_name, shown, exc, row)
                             ) from None


def _bad_at(t: Target, value: float, seconds: bool, row: int) -> InvalidJob:
    """The error of an ``at_col`` value ``_at_micros`` refuses, in ``check_at``'s words."""
    if seconds and not math.isfinite(value):
        return InvalidJob("at_col %r = %r (epoch seconds: not finite, row %d of the batch)"
                          % (t.when_name, value, row))
    micros = round(value * 1e6) if seconds else int(value)
    try:
        moment = (_EPOCH + timedelta(microseconds=micros)).isoformat()
    except OverflowError:  # outside years 1 to 9999
        moment = None
    if seconds:
        shown = "%r (epoch seconds%s)" % (value, "" if moment is None else ": " + moment)
    else:
        shown = moment or "%d microseconds from the epoch" % micros
    if micros < _FIRST_US:
        return InvalidJob("at_col %r = %s cannot be converted to a time; use a year from 1 to "
                          "9999 (row %d of the batch)" % (t.when_name, shown, row))
    return InvalidJob("at_col %r = %s is more than 100 years from now (at most %d seconds "
                      "ahead, as delay) (row %d of the batch)"
                      % (t.when_name, shown, validation.MAX_DELAY_SECONDS, row))


def _own_ids(t: Target, positions: pa.Array, args: pa.Array, kwargs: pa.Array) -> list[str]:
    """The ids of rows without a key, from the call, the partition, each row's position
    in it and its arguments: the same in a retried task (``batch_ids.ids_for_rows``)."""
    rows = pc.binary_join_element_wise(pc.cast(positions, pa.string()), args, kwargs, "\x00")
    return batch_ids.ids_for_rows(t.call_id, t.call_ms, t.partition,
                                  pc.cast(rows, pa.binary()).to_pylist())


def _check_keys(t: Target, keys: pa.Array) -> None:
    empty = pc.fill_null(pc.equal(keys, ""), False)
    if pc.any(empty).as_py():
        bad = int(pc.index(empty, True).as_py())
        raise InvalidJob("key_col %r: key must be a non-empty string, not '' (row %d of the "
                         "batch)" % (t.key_name, bad))
    long = pc.fill_null(pc.greater(pc.utf8_length(keys), option_checks.MAX_KEY_LENGTH), False)
    if pc.any(long).as_py():
        bad = int(pc.index(long, True).as_py())
        raise InvalidJob("key_col %r: key must be at most %d characters (row %d of the batch)"
                         % (t.key_name, option_checks.MAX_KEY_LENGTH, bad))
    nul = pc.fill_null(pc.match_substring(keys, "\x00"), False)
    if pc.any(nul).as_py():
        bad = int(pc.index(nul, True).as_py())
        raise InvalidJob("key_col %r: key %s contains %s (row %d of the batch)"
                         % (t.key_name, validation.short(keys[bad].as_py()), validation.NUL,
                            bad))


def _ids(t: Target, batch: pa.RecordBatch, first: int, args: pa.Array,
         kwargs: pa.Array) -> tuple[list[str], pa.Array | None]:
    """Each row's id: from its key, else from the call and the row's place in the
    partition (``first``: the place of the batch's first row)."""
    n = batch.num_rows
    if "_key" not in batch.schema.names:
        return _own_ids(t, pa.array(range(first, first + n), pa.int64()), args, kwargs), None
    keys = batch.column("_key")
    _check_keys(t, keys)
    values = keys.to_pylist()
    if not keys.null_count:
        return batch_ids.ids_for_keys(t.job.queue, values), keys
    nulls = pc.indices_nonzero(pc.is_null(keys))
    own = iter(_own_ids(t, pc.add(nulls, first), args.take(nulls), kwargs.take(nulls)))
    keyed = iter(batch_ids.ids_for_keys(t.job.queue, [k for k in values if k is not None]))
    return [next(own) if k is None else next(keyed) for k in values], keys


def _payload(t: Target, batch: pa.RecordBatch) -> tuple[pa.Array, pa.Array]:
    n = batch.num_rows
    args = [arrow_json.json_texts(batch.column("_a%d" % i),
                                  "args[%d] (column %r)" % (i, t.arg_names[i]))
            for i in range(t.n_args)]
    kwargs = [arrow_json.json_texts(batch.column("_k%d" % i),
                                    "kwargs[%r] (column %r)" % (name, name))
              for i, name in enumerate(t.kwargs_names)]
    return arrow_json.args_array(args, n), arrow_json.kwargs_array(t.kwargs_names, kwargs, n)


def _check_size(t: Target, args: pa.Array, kwargs: pa.Array) -> None:
    """The payload is limited in UTF-8 bytes as the compact array
    ``[path,args,kwargs,max_attempts(,backoff)]``, like ``schedule_many``."""
    fixed = t.job.head
    sizes = pc.add(pc.add(pc.binary_length(args), pc.binary_length(kwargs)), fixed)
    if len(sizes) and pc.max(sizes).as_py() > t.max_payload:
        bad = int(pc.index(pc.greater(sizes, t.max_payload), True).as_py())
        validation.check_size(sizes[bad].as_py(), t.max_payload, " (row %d of the batch)" % bad)


def describe_row(t: Target, batch: pa.RecordBatch, index: int) -> str:
    """A row as the caller knows it: its key, else its values by DataFrame column name."""
    names = {"_when": t.when_name, "_key": t.key_name}
    names.update({"_a%d" % i: n for i, n in enumerate(t.arg_names)})
    names.update({"_k%d" % i: n for i, n in enumerate(t.kwargs_names)})
    row = batch.slice(index, 1).to_pylist()[0]
    if row.get("_key") is not None:
        return "the DataFrame row with %s = %r" % (t.key_name, row["_key"])
    values = ", ".join("%s=%r" % (names.get(k) or k, v) for k, v in row.items()
                       if k != "_none")
    if len(values) > MAX_ROW_TEXT:
        values = values[:MAX_ROW_TEXT] + "..."
    return "the DataFrame row %s" % (values or "(no columns)")


def build(t: Target, batch: pa.RecordBatch, now: datetime, first: int = 0) -> JobColumns:
    """Every value of this batch's jobs, checked; raises ``InvalidJob`` naming a bad one
    and its row (see ``describe_row``). ``first``: the position of the batch's first row
    in its partition."""
    try:
        return _build(t, batch, now, first)
    except InvalidJob as exc:
        text = str(exc)
        found = _BATCH_ROW.search(text)
        if found is None:
            raise
        where = describe_row(t, batch, int(found.group(1)))
        raise InvalidJob(text[:found.start()] + where + text[found.end():]) from None


def _build(t: Target, batch: pa.RecordBatch, now: datetime, first: int) -> JobColumns:
    now_us = epoch_us(now)
    run_at_us, at_ms, delay_ms = _when(t, batch, now_us)
    if t.when == "at" and now.tzinfo is None:  # USE_TZ = False: stored as local wall time
        _check_wall_times(t, batch.column("_when"), run_at_us)
    args, kwargs = _payload(t, batch)
    ids, keys = _ids(t, batch, first, args, kwargs)
    _check_size(t, args, kwargs)
    own = 0 if keys is None else (int(pc.index(pc.is_null(keys), True).as_py())
                                  if keys.null_count else -1)
    return JobColumns(ids=ids, keys=keys, keyed=keys is not None and keys.null_count < len(keys),
                      own_first=ids[own] if ids and own >= 0 else None,
                      args=args, kwargs=kwargs, run_at_us=run_at_us, at_ms=at_ms,
                      delay_ms=delay_ms)
