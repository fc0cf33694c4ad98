"""A NUL character in a job's arguments: ``InvalidJob`` naming the value through every way
in, on every database (PostgreSQL's jsonb cannot store it; SQLite would), before anything
reaches the database, so the caller's transaction goes on. A string holding a backslash
followed by ``u0000`` (JSON's escape of NUL, as text) is no NUL: it is stored as given."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.db import transaction

from django_delayq import InvalidJob, compat, schedule_spec
from django_delayq.core import progress
from django_delayq.core.aio import aschedule, aschedule_spec
from django_delayq.core.api import JobSpec, job, schedule, schedule_many
from django_delayq.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

NUL_CASES = [  # (args, kwargs, the place and value named)
    (("a\x00b", 2), {}, r"args\[0\] = 'a\\x00b' \(a NUL character"),
    (({"k\x00": 1}, 2), {}, r"args\[0\] has the key 'k\\x00' \(a NUL character"),
    (([1, ["deep\x00"]], 2), {}, r"args\[0\]\[1\]\[0\] = 'deep\\x00' \(a NUL"),
    ((1,), {"b": "\x00"}, r"kwargs\['b'\] = '\\x00' \(a NUL character"),
    ((1,), {"b": {"x": {"y\x00z": None}}}, r"kwargs\['b'\]\['x'\] has the key 'y\\x00z'"),
    ((1,), {"b\x00": 2}, r"kwargs has the key 'b\\x00' \(a NUL character"),
]


def ways_in(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Each way in, as a call scheduling ``tests.jobs.add(*args, **kwargs)``."""
    spec = JobSpec(args=args, kwargs=kwargs)
    add = "tests.jobs.add"
    return {
        "schedule": lambda: schedule(add, *args, **kwargs),
        "job().schedule": lambda: job(add).schedule(*args, **kwargs),
        "job().using().schedule": lambda: job(add).using(priority=3).schedule(*args, **kwargs),
        "schedule_spec": lambda: schedule_spec(add, spec),
        "schedule_many": lambda: schedule_many(add, [JobSpec(args=(1, 2)), spec]),
        "schedule_many, a spec of its own queue": lambda: schedule_many(
            add, [JobSpec(args=(1, 2)), JobSpec(args=args, kwargs=kwargs, queue="default")]),
        "schedule_many after=": lambda: schedule_many(add, [spec], after=[]),
        "job().schedule_many": lambda: job(add).using(priority=3).schedule_many([spec]),
        "aschedule": lambda: asyncio.run(aschedule(add, *args, **kwargs)),
        "aschedule_spec": lambda: asyncio.run(aschedule_spec(add, spec)),
    }


@pytest.mark.parametrize(("args", "kwargs", "named"), NUL_CASES)
def test_a_nul_in_the_arguments_is_refused_by_every_way_in(delayq_settings, args, kwargs, named) -> None:  # type: ignore[no-untyped-def]
    for way, call in ways_in(args, kwargs).items():
        with pytest.raises(InvalidJob, match=named):
            call()
        assert not Job.objects.exists(), way


def test_the_callers_transaction_goes_on_after_the_refusal(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    """On PostgreSQL the INSERT's DataError aborted the transaction: nothing after it ran."""
    with transaction.atomic():
        with pytest.raises(InvalidJob, match="NUL"):
            schedule("tests.jobs.add", "a\x00b", 2)
        kept = schedule("tests.jobs.add", 1, 2)
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.id]


@pytest.mark.skipif(compat.tasks is None, reason="no Django Tasks framework")
def test_the_tasks_backend_refuses_it_as_invalid_task(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "ALLOWED_CALLABLES": ["tests.jobs", "tests.jobs_tasks"]}
    delayq_settings.TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQBackend"}}
    from tests import jobs_tasks

    with pytest.raises(compat.InvalidTask, match=r"args\[0\] = 'a\\x00b' \(a NUL"):
        jobs_tasks.add.enqueue("a\x00b", 2)
    with pytest.raises(compat.InvalidTask, match=r"kwargs\['b'\] has the key 'k\\x00'"):
        jobs_tasks.add.enqueue(1, b={"k\x00": 1})
    assert not Job.objects.exists()


@pytest.mark.parametrize(("option", "named"), [
    ({"after": ["01J\x00"]}, r"after= takes JobHandle objects or job ids; got '01J\\x00'"),
    ({"key": "k\x00"}, "key 'k\\\\x00' contains control characters"),
    ({"group": "g\x00"}, "group 'g\\\\x00' contains control characters"),
    ({"queue": "q\x00"}, "unknown queue 'q\\\\x00'"),
    ({"retry_on": "builtins.Value\x00Error"}, "retry_on: 'builtins.Value\\\\x00Error' is not"),
])
def test_a_nul_in_a_stored_option_is_refused(delayq_settings, option, named) -> None:  # type: ignore[no-untyped-def]
    """``after`` was asked of the database (PostgreSQL: a DataError); the others were
    refused already."""
    with pytest.raises(InvalidJob, match=named):
        schedule("tests.jobs.add", 1, 2, **option)
    with pytest.raises(InvalidJob, match=named):
        schedule_many("tests.jobs.add", [JobSpec(args=(1, 2), **option)])
    assert not Job.objects.exists()


ESCAPE = "a\\u0000b"  # a backslash, then u0000: JSON text "a\\\\u0000b", no NUL


def test_a_backslash_before_u0000_is_no_nul(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    ids = [schedule("tests.jobs.noop", ESCAPE, {ESCAPE: "\\" + ESCAPE}, note=ESCAPE).id,
           *schedule_many("tests.jobs.noop", [JobSpec(args=["\\\\u0000"]),
                                              JobSpec(kwargs={"k": [ESCAPE]})])]
    rows = {row.pk: (row.args, row.kwargs) for row in Job.objects.filter(pk__in=ids)}
    assert [rows[i] for i in ids] == [
        ([ESCAPE, {ESCAPE: "\\" + ESCAPE}], {"note": ESCAPE}), (["\\\\u0000"], {}),
        ([], {"k": [ESCAPE]})]


def test_progress_refuses_a_nul_not_a_backslash_before_u0000() -> None:
    assert progress.check(ESCAPE) == '"a\\\\u0000b"'
    assert progress.check({"k": ["\\" + ESCAPE]}) == '{"k":["\\\\a\\\\u0000b"]}'
    for bad in ("a\x00b", {"k\x00": 1}, ["\\\x00"]):
        with pytest.raises(InvalidJob, match="NUL"):
            progress.check(bad)


@pytest.mark.parametrize(("args", "kwargs", "named"), [
    ((10**4300, 2), {}, r"args\[0\] = an integer of more than 4300 digits"),
    ((1,), {"b": [1, {"x": -(10**5000)}]}, r"kwargs\['b'\]\[1\]\['x'\] = an integer of more"),
])
def test_an_integer_too_long_for_json_text_is_named_too(delayq_settings, args, kwargs, named) -> None:  # type: ignore[no-untyped-def]
    """Python refuses int-to-text past ``sys.get_int_max_str_digits()`` (4,300 digits by
    default): its place is named as a NUL's is, by every way in."""
    for way, call in ways_in(args, kwargs).items():
        with pytest.raises(InvalidJob, match=named):
            call()
        assert not Job.objects.exists(), way
