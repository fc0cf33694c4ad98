"""The column-wise pieces of schedule_dataframe, without Spark: ids, JSON text, due times."""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from django_delayq.core import ids, options  # noqa: E402
from django_delayq.exceptions import InvalidJob  # noqa: E402
from django_delayq.spark import arrow_jobs, arrow_json, batch_ids  # noqa: E402

NOW = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _target(backoff: Any = None, **changes: Any) -> arrow_jobs.Target:
    """A call's constants: its options as ``JobOptions.check`` resolves them (five attempts,
    ``backoff``), the rest as given."""
    path, max_attempts = "tests.jobs.add", 5
    job = options.Checked(path=path, queue="default", max_attempts=max_attempts,
                          backoff=backoff, now=NOW,
                          head=options.payload_head_size(path, max_attempts, backoff))
    values: dict[str, Any] = {"job": job, "max_payload": 10_000, "when": None, "n_args": 1,
                              "kwargs_names": (), "arg_names": ("a",), "when_name": "d",
                              "key_name": "k"}
    return arrow_jobs.Target(**{**values, **changes})


def test_ids_for_keys_are_those_of_id_for_key() -> None:
    rng = random.Random(7)
    alphabet = "ab\x00\t\n\"\\é中😀-_ "
    keys = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
            for _ in range(3000)]
    assert batch_ids.ids_for_keys("emails", keys) == [ids.id_for_key("emails", k) for k in keys]
    assert batch_ids.ids_for_keys("emails", []) == []


def test_ids_for_rows_look_like_new_id_and_differ() -> None:
    rows = [b"%d\x00[1]\x00{}" % i for i in range(5000)]
    made = batch_ids.ids_for_rows("call", 1_700_000_000_123, 0, rows)
    assert len(set(made)) == 5000 and made == batch_ids.ids_for_rows("call", 1_700_000_000_123,
                                                                     0, rows)
    one = ids.new_id()
    assert all(len(i) == 26 and set(i) <= set(ids._ALPHABET) for i in made)
    assert made[0][:10] == ids._b32(1_700_000_000_123, 10) and len(one) == 26
    assert {i[10] for i in made} == set(ids._ALPHABET)  # every character drawn
    assert batch_ids.ids_for_rows("call", 1, 0, []) == []


@pytest.mark.parametrize("values", [
    ["plain", "with \"quotes\"", "back\\slash", "tab\tnew\nline\r", "\x01\x1f", "é 中 😀", "", None],
    ["all", "clean", None],
    [1, -2, 2**62, None],
    [True, False, None],
    [0.1, 1.0, 1e20, 1e-7, -0.0, None],
    [[1, 2], [], None, [None]],
    [{"x": 1, "y": "a\"b"}, None],
])
def test_json_texts_are_what_json_dumps_writes(values: list[Any]) -> None:
    texts = arrow_json.json_texts(pa.array(values), "args[0]").to_pylist()
    expected = [json.dumps(v, separators=(",", ":"), ensure_ascii=False) for v in values]
    assert texts == expected
    assert [json.loads(t) for t in texts] == values


def test_json_texts_of_maps_are_objects() -> None:
    col = pa.array([[("k", 1), ("j", 2)], None], pa.map_(pa.string(), pa.int64()))
    assert arrow_json.json_texts(col, "x").to_pylist() == ['{"k":1,"j":2}', "null"]


def test_non_finite_floats_are_named() -> None:
    with pytest.raises(InvalidJob, match=r"args\[0\] \(column 'r'\) = inf \(not finite, row 2"):
        arrow_json.json_texts(pa.array([1.0, None, float("inf")]), "args[0] (column 'r')")


def test_args_and_kwargs_arrays() -> None:
    a = pa.array(['"x"', "1"])
    assert arrow_json.args_array([a, a], 2).to_pylist() == ['["x","x"]', "[1,1]"]
    assert arrow_json.kwargs_array(["b", "c\""], [a, a], 2).to_pylist() == [
        '{"b":"x","c\\"":"x"}', '{"b":1,"c\\"":1}']
    assert arrow_json.args_array([], 1).to_pylist() == ["[]"]


def test_delays_give_run_at_and_delay_ms() -> None:
    batch = pa.RecordBatch.from_pydict({"_when": pa.array([1.5, None, 0.0004]),
                                        "_a0": pa.array([1, 2, 3])})
    cols = arrow_jobs.build(_target(when="delay", null_when="now"), batch, NOW)
    now_us = arrow_jobs.epoch_us(NOW)
    assert cols.run_at_us.to_pylist() == [now_us + 1_500_000, now_us, now_us + 400]
    assert cols.delay_ms == [1500, 0, 0] and cols.at_ms is None
    assert cols.args.to_pylist() == ["[1]", "[2]", "[3]"]
    assert NOW + timedelta(microseconds=cols.run_at_us[0].as_py() - now_us) == \
        NOW + timedelta(seconds=1.5)


def test_at_times_and_keys() -> None:
    batch = pa.RecordBatch.from_pydict({
        "_when": pa.array([1_893_553_445_678_901, None], pa.int64()),
        "_key": pa.array(["order-1", None]), "_a0": pa.array([1, 2])})
    cols = arrow_jobs.build(_target(when="at", backoff=[5], null_when="now"), batch, NOW)
    assert cols.at_ms == [1_893_553_445_678, None]
    assert cols.run_at_us.to_pylist() == [1_893_553_445_678_901, arrow_jobs.epoch_us(NOW)]
    assert cols.ids[0] == ids.id_for_key("default", "order-1") and cols.ids[1][0] != "k"
    assert cols.keyed and cols.kwargs.to_pylist() == ["{}", "{}"]
    kept = cols.keep({cols.ids[0]}, inside=False)
    assert kept.ids == [cols.ids[1]] and kept.args.to_pylist() == ["[2]"]
    assert kept.at_ms == [None] and kept.keys is not None and kept.keys.to_pylist() == [None]


@pytest.mark.parametrize(("columns", "message"), [
    ({"_when": pa.array([3.0, -1.0])},
     r"delay_col 'd': delay must be >= 0, got -1.0 \(the DataFrame row a=2, d=-1.0\)"),
    ({"_when": pa.array([float("nan"), 1.0])},
     r"delay must be a number of seconds, got nan \(not a number\) \(the DataFrame row a=1"),
    ({"_key": pa.array(["a", ""])},
     r"key_col 'k': key must be a non-empty string, not '' \(the DataFrame row with k = ''\)"),
    ({"_a0": pa.array(["x" * 20_000, "y"])}, r"payload is 20028 bytes, over .* \(the DataFrame row a='xxx"),
    ({"_a0": pa.array(["y", "é" * 4_985]), "_key": pa.array(["o-1", "o-2"])},
     r"payload is 9998 bytes, over .* = 9997 \(the DataFrame row with k = 'o-2'\)"),
    ({"_when": pa.array([1.0, None])},
     r"delay_col 'd' is null \(the DataFrame row a=2, d=None\); .* null_when='now'"),
    ({"_a0": pa.array(["x", "a\x00b"])},  # schedule()'s words, on every database
     r"args\[0\] \(column 'a'\) = 'a\\x00b' \(a NUL character, which PostgreSQL cannot "
     r"store: refused on every database\) \(the DataFrame row a='a\\x00b'\)"),
    ({"_a0": pa.array([["x"], ["y", "\x00"]])},
     r"args\[0\] \(column 'a'\)\[1\] = '\\x00' \(a NUL character.* \(the DataFrame row "
     r"a=\['y', '\\x00'\]\)"),
    ({"_a0": pa.array([[("k\x00", 1)], None], pa.map_(pa.string(), pa.int64()))},
     r"args\[0\] \(column 'a'\) has the key 'k\\x00' \(a NUL character"),
    ({"_a0": pa.array([{"s": "\x00"}], pa.struct([("s", pa.string())])).take([0, 0])},
     r"args\[0\] \(column 'a'\)\['s'\] = '\\x00' \(a NUL character"),
    ({"_key": pa.array(["o-1", "o\x002"])},
     r"key_col 'k': key 'o\\x002' contains a NUL character, which PostgreSQL cannot store: "
     r"refused on every database \(the DataFrame row with k = 'o\\x002'\)"),
])
def test_bad_values_are_named(columns: dict[str, Any], message: str) -> None:
    """Errors name the DataFrame row (its key, else its values by column name), never a
    position inside a batch that Spark chose."""
    data = {"_a0": pa.array([1, 2]), **columns}
    limit = 9_997 if "= 9997" in message else 10_000  # 9,998 UTF-8 bytes: one too many
    with pytest.raises(InvalidJob, match=message) as caught:
        arrow_jobs.build(_target(when="delay" if "_when" in data else None, max_payload=limit),
                         pa.RecordBatch.from_pydict(data), NOW)
    assert "of the batch" not in str(caught.value)


def test_rows_without_a_key_get_the_same_ids_in_a_retried_task() -> None:
    """Ids of rows without a key derive from the call, the partition, the row's place in
    it and its arguments: a retry of the task makes the same ids; another call, another
    partition or place, or other arguments make others. They sort by the call's time."""
    batch = pa.RecordBatch.from_pydict({"_a0": pa.array([1, 2, 2])})
    call = _target(call_id="c1", call_ms=1_700_000_000_123, partition=3)
    first = arrow_jobs.build(call, batch, NOW, 10)
    assert arrow_jobs.build(call, batch, NOW + timedelta(seconds=9), 10).ids == first.ids
    assert len(set(first.ids)) == 3 and first.own_first == first.ids[0] and not first.keyed
    assert all(i[:10] == ids._b32(1_700_000_000_123, 10) and len(i) == 26 for i in first.ids)
    others = [arrow_jobs.build(_target(call_id="c2", call_ms=1_700_000_000_123, partition=3),
                               batch, NOW, 10),
              arrow_jobs.build(_target(call_id="c1", call_ms=1_700_000_000_123, partition=4),
                               batch, NOW, 10),
              arrow_jobs.build(call, batch, NOW, 13),
              arrow_jobs.build(call, pa.RecordBatch.from_pydict({"_a0": pa.array([1, 2, 3])}),
                               NOW, 10)]
    for other in others[:3]:
        assert not set(other.ids) & set(first.ids)
    assert others[3].ids[:2] == first.ids[:2] and others[3].ids[2] != first.ids[2]
    keyed = pa.RecordBatch.from_pydict({"_a0": pa.array([1, 2, 2]),
                                        "_key": pa.array(["o-1", None, None])})
    mixed = arrow_jobs.build(call, keyed, NOW, 10)
    assert mixed.ids[1:] == first.ids[1:] and mixed.own_first == first.ids[1] and mixed.keyed
    assert mixed.ids[0] == ids.id_for_key("default", "o-1")
    whole = pa.RecordBatch.from_pydict({"_a0": pa.array([1]), "_key": pa.array(["o-1"])})
    assert arrow_jobs.build(call, whole, NOW, 10).own_first is None


def test_a_null_due_time_is_refused_unless_now_is_asked() -> None:
    batch = pa.RecordBatch.from_pydict({"_when": pa.array([None, 5_000_000], pa.int64()),
                                        "_a0": pa.array([7, 8])})
    with pytest.raises(InvalidJob, match=r"at_col 'd' is null \(the DataFrame row d=None, a=7"):
        arrow_jobs.build(_target(when="at"), batch, NOW)
    cols = arrow_jobs.build(_target(when="at", null_when="now"), batch, NOW)
    assert cols.run_at_us.to_pylist() == [arrow_jobs.epoch_us(NOW), 5_000_000]


def test_payload_size_is_that_of_the_envelope() -> None:
    """The limit applies to ``[path,args,kwargs,max_attempts(,backoff)]`` in UTF-8 bytes,
    like ``schedule_many``: exactly at the limit passes."""
    envelope = json.dumps(["tests.jobs.add", ["é" * 100], {}, 5, [5, 60]],
                          separators=(",", ":"), ensure_ascii=False)
    batch = pa.RecordBatch.from_pydict({"_a0": pa.array(["é" * 100])})
    size = len(envelope.encode())
    arrow_jobs.build(_target(backoff=[5, 60], max_payload=size), batch, NOW)
    with pytest.raises(InvalidJob, match="payload is %d bytes" % size):
        arrow_jobs.build(_target(backoff=[5, 60], max_payload=size - 1), batch, NOW)


@pytest.mark.parametrize(("when", "message"), [
    (pa.array([1.9e9, 3e11]), r"at_col 'd' = 300000000000.0 \(epoch seconds\) is more than 100 "
                              r"years from now \(at most 3153600000 seconds ahead, as delay\)"),
    (pa.array([1.9e9, 1e11]), r"at_col 'd' = 100000000000.0 \(epoch seconds: "
                              r"5138-11-16T09:46:40\+00:00\) is more than 100 years from now"),
    (pa.array([-1e11, 1.9e9]), r"at_col 'd' = -100000000000.0 \(epoch seconds\) cannot be "
                               r"converted to a time; use a year from 1 to 9999"),
    (pa.array([1.9e9, float("nan")]), r"at_col 'd' = nan \(epoch seconds: not finite, the "
                                      r"DataFrame row with k = 'o-2'\)"),
    (pa.array([float("-inf"), 1.9e9]), r"at_col 'd' = -inf \(epoch seconds: not finite, the "
                                       r"DataFrame row with k = 'o-1'\)"),
    (pa.array([0, 7_000_000_000_000_000], pa.int64()),
     r"at_col 'd' = 2191-10-27T12:26:40\+00:00 is more than 100 years from now"),
])
def test_due_times_schedule_refuses_are_named(when: Any, message: str) -> None:
    """``at_col`` takes the bounds of ``schedule(at=...)``: a time from year 1 to 100 years
    from now; epoch seconds that are NaN or infinite are named, with their row."""
    batch = pa.RecordBatch.from_pydict({"_when": when, "_key": pa.array(["o-1", "o-2"]),
                                        "_a0": pa.array([1, 2])})
    with pytest.raises(InvalidJob, match=message) as caught:
        arrow_jobs.build(_target(when="at"), batch, NOW)
    assert "of the batch" not in str(caught.value) and "\n" not in str(caught.value)


def test_epoch_seconds_become_microseconds_up_to_the_bound() -> None:
    now_s = arrow_jobs.epoch_us(NOW) / 1e6
    limit = now_s + 100 * 365 * 24 * 3600
    batch = pa.RecordBatch.from_pydict({"_when": pa.array([1.5, -62135596800.0, limit, None]),
                                        "_a0": pa.array([1, 2, 3, 4])})
    cols = arrow_jobs.build(_target(when="at", null_when="now"), batch, NOW)
    assert cols.run_at_us.to_pylist() == [1_500_000, -62135596800_000_000, round(limit * 1e6),
                                          arrow_jobs.epoch_us(NOW)]
    assert cols.at_ms == [1500, -62135596800_000, round(limit * 1e6) // 1000, None]


def _us(year: int) -> int:
    return (datetime(year, 1, 1, tzinfo=UTC) - arrow_jobs._EPOCH) // timedelta(microseconds=1)


def test_timestamps_far_from_1970_are_checked_as_integers() -> None:
    """Microseconds more than 2**53 from 1970 (before 1685, after 2255) are compared as
    int64: a float bound made Arrow refuse to cast them (ArrowInvalid, no row named)."""
    batch = pa.RecordBatch.from_pydict({"_when": pa.array([_us(1), _us(1600)], pa.int64()),
                                        "_key": pa.array(["o-1", "o-2"]), "_a0": pa.array([1, 2])})
    cols = arrow_jobs.build(_target(when="at"), batch, NOW)
    assert cols.run_at_us.to_pylist() == [_us(1), _us(1600)]  # schedule(at=...) takes them
    batch = pa.RecordBatch.from_pydict({"_when": pa.array([_us(2000), _us(3000)], pa.int64()),
                                        "_key": pa.array(["o-1", "o-2"]), "_a0": pa.array([1, 2])})
    with pytest.raises(InvalidJob, match=r"at_col 'd' = 3000-01-01T00:00:00\+00:00 is more than "
                                         r"100 years from now .*the DataFrame row with k = 'o-2'"):
        arrow_jobs.build(_target(when="at"), batch, NOW)


@pytest.fixture()
def west_of_utc(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The process' local zone (Django's TIME_ZONE) 5 hours west of UTC."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(("when", "shown"), [
    (pa.array([_us(2000), _us(1)], pa.int64()), "0001-01-01T00:00:00"),
    (pa.array([9.5e8, -62135596800.0]), r"-62135596800.0 \(epoch seconds: 0001-01-01T00:00:00"),
])
def test_without_use_tz_a_time_with_no_local_wall_time_is_named(west_of_utc: Any, when: Any,
                                                                 shown: str) -> None:
    """USE_TZ=False (a naive now) stores the local wall time: year 1 at midnight UTC has
    none 5 hours west; refused naming column, value and row, as ``schedule()`` does."""
    batch = pa.RecordBatch.from_pydict({"_when": when, "_key": pa.array(["o-1", "o-2"]),
                                        "_a0": pa.array([1, 2])})
    with pytest.raises(InvalidJob, match=r"at_col 'd' = %s.* has no wall time in the local "
                                         r"TIME_ZONE .*the DataFrame row with k = 'o-2'" % shown):
        arrow_jobs.build(_target(when="at"), batch, NOW.replace(tzinfo=None))
    ok = pa.RecordBatch.from_pydict({"_when": pa.array([_us(1) + 86_400 * 10**6], pa.int64()),
                                     "_key": pa.array(["o-3"]), "_a0": pa.array([3])})
    assert arrow_jobs.build(_target(when="at"), ok, NOW.replace(tzinfo=None)).ids
