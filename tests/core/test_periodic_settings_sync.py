"""A definition of ``DELAYQ["SCHEDULES"]`` that cannot be stored never stops the others:
``sync_settings`` skips it, logging a warning naming it and the reason, and the other
schedules are upserted and tick (a bad ``jitter`` used to fail every keeper pass, and so
did a bad ``priority``: its option keys are checked as ``schedule()`` checks them). A
schedule the sync disables (not in this process's settings) is logged at WARNING."""

from __future__ import annotations

import logging

import pytest

from django_delayq.core import conf, periodic
from django_delayq.models import Schedule
from tests.helpers import point_at

pytestmark = pytest.mark.django_db(transaction=True)
GOOD = {"callable": "tests.jobs.noop", "interval": 600}


@pytest.mark.parametrize("key, value", [("jitter", -1), ("jitter", "abc"),
                                        ("enabled", "no"), ("group", "a\nb"),
                                        ("priority", 1000), ("priority", "high"),
                                        ("atomic", "yes")])
def test_a_bad_definition_is_skipped_and_the_others_tick(settings, redis_server, caplog,  # type: ignore[no-untyped-def]
                                                         key, value) -> None:
    point_at(settings, redis_server, ALLOWED_CALLABLES=["tests.jobs"])
    with caplog.at_level(logging.WARNING, logger="django_delayq.core.periodic"):
        periodic.sync_settings({"bad": {**GOOD, key: value}, "good": GOOD})
    assert list(Schedule.objects.values_list("name", flat=True)) == ["good"]
    assert periodic.keep_all() == 0
    assert Schedule.objects.get(name="good").next_tick_at is not None
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "'bad'" in warning and repr(value) in warning, warning


def test_a_definition_turned_bad_leaves_its_row_as_it_was(settings, redis_server) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, ALLOWED_CALLABLES=["tests.jobs"])
    periodic.sync_settings({"s": GOOD})
    periodic.sync_settings({"s": {**GOOD, "interval": 60, "jitter": -1}})
    assert Schedule.objects.get(name="s").interval_seconds == 600


@pytest.mark.parametrize("priority, shown", [(101, "101"), (-101, "-101"), ("high", "'high'"),
                                             (True, "True"), (1.5, "1.5")])
def test_a_bad_priority_is_named_as_schedule_names_it(priority, shown) -> None:  # type: ignore[no-untyped-def]
    """The message of ``schedule(priority=...)``, after the schedule's name."""
    assert conf.settings_problems({"nightly": {**GOOD, "priority": priority}}) == [
        "DELAYQ['SCHEDULES']['nightly']: priority must be an integer from -100 to 100, not %s"
        % shown]


def test_a_worker_of_older_settings_disables_a_newer_schedule_with_a_warning(  # type: ignore[no-untyped-def]
        settings, redis_server, caplog) -> None:
    """A rolling deploy: a worker of the new settings (``old`` and ``brandnew``) starts,
    then one of the old settings (``old`` only). The rule stays (removed from the settings:
    disabled), but the disable is logged at WARNING, naming the schedule and why; a later
    start of the new settings does not enable it again (docs/periodic.md)."""
    point_at(settings, redis_server, ALLOWED_CALLABLES=["tests.jobs"])
    periodic.sync_settings({"old": GOOD, "brandnew": GOOD})  # the v2 worker
    with caplog.at_level(logging.WARNING, logger="django_delayq.core.periodic"):
        assert periodic.sync_settings({"old": GOOD}) == 0  # then a v1 worker
    assert not Schedule.objects.get(name="brandnew").enabled
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "'brandnew' disabled" in warning and "DELAYQ['SCHEDULES']" in warning, warning
    assert "'old'" not in warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="django_delayq.core.periodic"):
        periodic.sync_settings({"old": GOOD})  # already disabled: nothing said again
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    periodic.sync_settings({"old": GOOD, "brandnew": GOOD})  # a v2 worker again
    assert not Schedule.objects.get(name="brandnew").enabled  # the admin's Enable does it
