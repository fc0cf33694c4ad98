"""``manage.py check`` refuses a ``DELAYQ["SCHEDULES"]`` entry no tick of which could run
(``delayq.E032``, naming the schedule and the value), as ``schedule()`` would refuse its
job: a callable the allow-list refuses or that does not exist, arguments that do not fit
the function, a queue ``QUEUES`` does not list."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_delayq.observe import checks

BAD = {
    "a module not allowed": ({"callable": "os.system"}, "'os.system'"),
    "no such function": ({"callable": "tests.jobs.nosuchfn"}, "nosuchfn"),
    "args that do not fit": ({"callable": "tests.jobs.add", "args": [1]}, "tests.jobs.add"),
    "kwargs that do not fit": ({"callable": "tests.jobs.add",
                                "kwargs": {"a": 1, "b": 2, "c": 3}}, "'c'"),
    "a queue not in QUEUES": ({"callable": "tests.jobs.noop", "queue": "nope"}, "'nope'"),
}


def _errors(settings, **schedules):  # type: ignore[no-untyped-def]
    settings.DELAYQ = {"QUEUES": ["default"], "ALLOWED_CALLABLES": ["tests.jobs"],
                       "SCHEDULES": schedules}
    return checks.check_settings()


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_schedule_no_tick_of_which_could_run_is_e032(settings, case) -> None:  # type: ignore[no-untyped-def]
    definition, value = BAD[case]
    [error] = _errors(settings, bad={**definition, "interval": 5},
                      good={"callable": "tests.jobs.add", "args": [1, 2], "interval": 5})
    assert (error.id, error.obj) == ("delayq.E032", "DELAYQ['SCHEDULES']")
    assert "DELAYQ['SCHEDULES']['bad']" in error.msg and value in error.msg, error.msg
    assert error.hint == checks.HINTS["SCHEDULES"]


def test_good_schedules_pass(settings) -> None:  # type: ignore[no-untyped-def]
    assert _errors(settings, nightly={"callable": "tests.jobs.add", "kwargs": {"a": 1, "b": 2},
                                      "cron": "0 2 * * *", "queue": "default"},
                   often={"callable": "tests.jobs.noop", "args": [1, "x"], "interval": 60}) == []


@pytest.mark.parametrize("key, value", [("args", 5), ("args", "ab"), ("kwargs", [1])])
def test_args_and_kwargs_of_the_wrong_type_are_e032_not_a_crash(settings, key, value) -> None:  # type: ignore[no-untyped-def]
    [error] = _errors(settings, bad={"callable": "tests.jobs.noop", "interval": 5, key: value})
    assert error.id == "delayq.E032" and "'bad'" in error.msg and repr(value) in error.msg


@pytest.mark.django_db  # Django 6 model checks query the database (JSONField support)
def test_manage_py_check_fails_on_a_schedule_that_cannot_run(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {"QUEUES": ["default"], "ALLOWED_CALLABLES": ["tests.jobs"],
                       "SCHEDULES": {"bad": {"callable": "os.system", "interval": 5}}}
    with pytest.raises(SystemCheckError) as info:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    assert "delayq.E032" in str(info.value) and "'bad'" in str(info.value)


def test_a_schedule_whose_module_fails_at_import_is_reported_not_raised(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {"QUEUES": ["default"], "ALLOWED_CALLABLES": ["tests.jobs", "tests.jobs_broken"],
                       "SCHEDULES": {"broken": {"callable": "tests.jobs_broken.job", "interval": 5}}}
    [error] = checks.check_settings()
    assert error.id == "delayq.E032" and "RuntimeError: this module fails at import" in error.msg


def test_a_naive_or_non_datetime_start_or_end_is_reported(settings) -> None:  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime
    naive, aware = datetime(2030, 1, 1), datetime(2031, 1, 1, tzinfo=UTC)
    for bad in ({"start": naive, "end": aware}, {"start": "2030-01-01"}, {"end": naive}):
        errors = _errors(settings, s={"callable": "tests.jobs.add", "args": [1, 2],
                                      "interval": 5, **bad})
        assert errors and all("must be an aware datetime" in e.msg for e in errors), errors


def test_without_allowed_callables_only_e025_is_said(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {"QUEUES": ["default"], "SCHEDULES": {
        "a": {"callable": "tests.jobs.add", "args": [1, 2], "interval": 5}}}
    assert [e.id for e in checks.check_settings()] == ["delayq.E025"]


@pytest.mark.parametrize("key, value", [
    ("jitter", -1), ("jitter", "abc"), ("jitter", 1.5), ("jitter", True), ("jitter", 2**31),
    ("enabled", "no"), ("enabled", 1), ("enabled", None)])
def test_a_bad_jitter_or_enabled_is_e032_naming_the_schedule_and_value(settings, key, value) -> None:  # type: ignore[no-untyped-def]
    """Else the check passed and the keeper's sync failed on the row, every pass."""
    [error] = _errors(settings, good={"callable": "tests.jobs.noop", "interval": 600},
                      bad={"callable": "tests.jobs.noop", "interval": 600, key: value})
    assert (error.id, error.obj) == ("delayq.E032", "DELAYQ['SCHEDULES']")
    assert "['bad']" in error.msg and repr(key) in error.msg and repr(value) in error.msg


def test_a_start_more_than_100_years_ahead_is_e032(settings) -> None:  # type: ignore[no-untyped-def]
    """No tick of it could be scheduled; the admin form refuses it too."""
    from datetime import UTC, datetime
    [error] = _errors(settings, good={"callable": "tests.jobs.noop", "interval": 600},
                      bad={"callable": "tests.jobs.noop", "interval": 600,
                           "start": datetime(2200, 1, 1, tzinfo=UTC)})
    assert error.id == "delayq.E032" and "['bad']" in error.msg
    assert "2200-01-01" in error.msg and "more than 100 years" in error.msg


def test_an_empty_group_or_queue_is_none_and_the_default(settings) -> None:  # type: ignore[no-untyped-def]
    assert _errors(settings, s={"callable": "tests.jobs.noop", "interval": 60, "group": "",
                                "queue": ""}) == []


def test_an_interval_longer_than_the_column_holds_is_e032(settings) -> None:  # type: ignore[no-untyped-def]
    """4,000,000,000 s was accepted, then the keeper never ticked it (its tick a century
    away) and PostgreSQL's column could not hold it."""
    [error] = _errors(settings, bad={"callable": "tests.jobs.noop", "interval": 4_000_000_000},
                      good={"callable": "tests.jobs.noop", "interval": 2**31 - 1})
    assert error.id == "delayq.E032" and "'bad'" in error.msg and "4000000000" in error.msg
