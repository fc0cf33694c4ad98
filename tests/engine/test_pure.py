import random

import pytest

from django_delayq.core import ids
from django_delayq.engine import backoff
from django_delayq.engine.envelope import Envelope


def test_envelope_round_trip_and_compact() -> None:
    env = Envelope(path="a.b", args=[1, "x"], kwargs={"k": None}, max_attempts=4, backoff=[1, 2])
    assert Envelope.decode(env.encode()) == env
    assert Envelope(path="a.b", args=[42]).encode() == '["a.b",[42]]'
    assert Envelope(path="a.b", max_attempts=3).encode() == '["a.b",[],{},3]'


@pytest.mark.parametrize("raw", ["nope", "{}", "[1, []]", '["a", {}]', '["a", [], [], 1]',
                                 '["a", [], {}, "3"]'])
def test_envelope_rejects_malformed(raw: str) -> None:
    with pytest.raises(ValueError):
        Envelope.decode(raw)


def test_backoff_policies() -> None:
    assert backoff.delay_ms(30, 1) == backoff.delay_ms(30, 7) == 30_000
    steps = [15, 180, 600, 1800, 3600]
    assert [backoff.delay_ms(steps, n) for n in range(1, 7)] == [
        15_000, 180_000, 600_000, 1_800_000, 3_600_000, 3_600_000]
    policy = {"base": 2, "factor": 3, "max": 100, "jitter": False}
    assert [backoff.delay_ms(policy, n) for n in (1, 2, 3, 4, 5)] == [
        2000, 6000, 18000, 54000, 100000]
    jittered = {"base": 10, "factor": 2, "max": 1000}
    values = {backoff.delay_ms(jittered, 3, random.Random(i)) for i in range(50)}
    assert all(20_000 <= v <= 40_000 for v in values) and len(values) > 10


@pytest.mark.parametrize("bad", [-1, [], [1, -2], "5s", {"base": -1}, {"speed": 2}, True])
def test_backoff_validate_names_the_problem(bad: object) -> None:
    assert backoff.validate(bad)


def test_ids_sort_by_time_and_keys_are_stable() -> None:
    a = ids.new_id()
    b = ids.new_id()
    assert len(a) == 26 and a[:10] <= b[:10]
    assert ids.id_for_key("q", "order-1") == ids.id_for_key("q", "order-1")
    assert ids.id_for_key("q", "order-1") != ids.id_for_key("r", "order-1")
    assert len(ids.id_for_key("q", "x")) == 26


def test_engine_imports_no_django() -> None:
    import subprocess
    import sys

    code = ("import sys, django_delayq.engine, django_delayq.exceptions; "
            "bad = [m for m in sys.modules if m == 'django' or m.startswith('django.')]; "
            "sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
