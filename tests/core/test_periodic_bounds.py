"""Periodic schedules at their edges: the ``once`` catch-up of a schedule far behind gives
the latest missed tick (a cron schedule a year behind gave the 1,000th tick after the
last one run), found in a few steps; no tick past the year 9999; and the admin form
answers with form errors, not a server error, for a start in the year 9999 (cronsim and
datetime overflow there) or arguments nested 3,000 levels deep; an interval is at most
2**31 - 1 s (settings, the admin form, ``replace``); ``replace`` refuses a bad definition
before writing anything."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from django_delayq.core import conf, periodic, schedules, validation
from django_delayq.core.schedules import Rule, last_tick, next_tick, zone_of
from django_delayq.exceptions import InvalidJob
from django_delayq.models import Job, JobStatus, Schedule
from tests.core.test_periodic import dq as _dq  # noqa: F401 - a fixture, used by name
from tests.helpers import staff_client


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def rule(cron: str = "", zone: str = "UTC", interval: int | None = None,
         **extra: datetime) -> Rule:
    return Rule(cron=cron, interval_s=interval, zone=zone_of(zone),
                anchor=extra.pop("anchor", utc(2025, 1, 1)), **extra)


def walked(r: Rule, after: datetime, until: datetime) -> datetime | None:
    """The latest tick in (after, until] by walking every tick (short windows only)."""
    found, tick = None, next_tick(r, after)
    while tick is not None and tick <= until:
        found, tick = tick, next_tick(r, tick)
    return found


def test_a_minutely_cron_a_year_behind_catches_up_its_latest_tick() -> None:
    now = utc(2026, 5, 1, 12, 0, 30)
    began = time.perf_counter()
    assert last_tick(rule("* * * * *"), now - timedelta(days=365), now) == utc(2026, 5, 1, 12)
    assert time.perf_counter() - began < 1.0  # a few steps, not 525,600 ticks
    assert last_tick(rule("13,47 * * * *"), utc(2025, 5, 1), now) == utc(2026, 5, 1, 11, 47)
    assert last_tick(rule(interval=60, anchor=utc(2025, 1, 1, 0, 0, 7)), utc(2025, 5, 1),
                     now) == utc(2026, 5, 1, 12, 0, 7)


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "UTC"])
@pytest.mark.parametrize(("cron", "window"), [
    ("* * * * *", timedelta(hours=3)), ("0 * * * *", timedelta(hours=30)),
    ("*/15 * * * *", timedelta(hours=6)), ("30 2 * * *", timedelta(days=3)),
    ("0 1 * * 0", timedelta(days=15))])
def test_the_latest_tick_is_the_one_the_ticks_walk_to(zone, cron, window) -> None:  # type: ignore[no-untyped-def]
    """Stepping back gives what walking forward gives, through both clock changes (the
    instants asked for span both changes of both zones: 00:00 to 10:00 UTC)."""
    r = rule(cron, zone)
    for day in ((2026, 3, 8), (2026, 3, 29), (2026, 10, 25), (2026, 11, 1)):
        for minutes in range(0, 10 * 60, 37):
            until = utc(*day) + timedelta(minutes=minutes, seconds=11)
            after = until - window
            assert last_tick(r, after, until) == walked(r, after, until), (day, minutes)


def test_start_end_and_after_bound_the_latest_tick() -> None:
    r = rule("0 * * * *", start=utc(2026, 1, 1, 5, 30), end=utc(2026, 1, 3))
    assert last_tick(r, utc(2025, 1, 1), utc(2026, 6, 1)) == utc(2026, 1, 3)
    assert last_tick(r, utc(2025, 1, 1), utc(2026, 1, 1, 5, 59)) is None  # before start
    assert last_tick(r, utc(2026, 1, 1, 7), utc(2026, 1, 1, 7, 30)) is None  # (7:00, 7:30]
    assert last_tick(r, utc(2026, 1, 1, 6, 59), utc(2026, 1, 1, 7, 30)) == utc(2026, 1, 1, 7)


def test_no_tick_past_the_year_9999() -> None:
    late = utc(9999, 12, 31, 23, 59, 59)
    assert next_tick(rule("* * * * *", start=late), utc(2026, 1, 1)) is None
    assert next_tick(rule(interval=60, anchor=late, start=late), late) is None
    assert next_tick(rule("0 0 1 1 *"), utc(9999, 6, 1)) is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_dq")
def test_once_materialises_the_latest_missed_tick_of_a_cron_schedule() -> None:
    now = timezone.now().replace(microsecond=0)
    s = Schedule.objects.create(name="minutely", callable_path="tests.jobs.noop",
                                cron="* * * * *", missed="once",
                                start_at=now - timedelta(days=366))
    job_id = periodic.advance(s, now - timedelta(days=365), now, catch_up=True)
    assert periodic.tick_of_key(Job.objects.get(pk=job_id).key) == now.replace(second=0)


FORM = {"name": "x", "callable_path": "tests.jobs.noop", "args": "[1]", "kwargs": "{}",
        "queue": "", "priority": "0", "cron": "* * * * *", "interval_seconds": "",
        "time_zone": "UTC", "start_at_0": "", "start_at_1": "", "end_at_0": "",
        "end_at_1": "", "jitter_seconds": "0", "missed": "skip", "enabled": "on"}
START_9999 = {"start_at_0": "9999-12-31", "start_at_1": "23:59:59"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("extra", "error"), [
    (START_9999, "start 9999-12-31T23:59:59+00:00 is more than 100 years from now"),
    ({**START_9999, "cron": "", "interval_seconds": "60"}, "more than 100 years from now"),
    ({"args": "[" * 3000 + "]" * 3000}, "JSON nested more than 100 levels deep"),
    ({"kwargs": '{"a": %s}' % ("[" * 3000 + "]" * 3000)}, "JSON nested more than 100 levels"),
])
@pytest.mark.usefixtures("_dq")
def test_the_admin_form_answers_with_an_error(extra, error) -> None:  # type: ignore[no-untyped-def]
    client = staff_client("view_schedule", "add_schedule", "change_schedule")
    page = client.post("/admin/django_delayq/schedule/add/", {**FORM, **extra})
    assert page.status_code == 200 and error in page.content.decode()
    assert not Schedule.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("values", "named"), [
    ({"cron": "61 * * * *", "interval_seconds": None}, "'61 * * * *'"),
    ({"interval_seconds": 0}, "not 0"),
    ({"interval_seconds": 4_000_000_000}, "not 4000000000"),
    ({"callable_path": "os.system"}, "os.system"),
])
@pytest.mark.usefixtures("_dq")
def test_replace_refuses_a_bad_definition_before_writing_anything(values, named) -> None:  # type: ignore[no-untyped-def]
    """``periodic.replace`` checks the definition it would write as the admin form does:
    ``InvalidJob`` naming the value, the row and its pending tick's job as they were (a
    bad cron raised cronsim's error, an interval of 0 ZeroDivisionError, each after the
    row was written and its tick cancelled: the schedule never ticked again)."""
    s = Schedule.objects.create(name="s", callable_path="tests.jobs.noop", interval_seconds=60)
    pending = periodic.keep(s)
    s.refresh_from_db()
    with pytest.raises(InvalidJob) as info:
        periodic.replace(s, values)
    assert named in str(info.value), str(info.value)
    after = Schedule.objects.get(pk=s.pk)
    assert (after.version, after.interval_seconds, after.cron, after.next_job_id) == (
        1, 60, "", pending)
    assert Job.objects.get(pk=pending).status == JobStatus.SCHEDULED
    assert periodic.replace(s, {"enabled": False})  # a disable alone is not checked


TOO_LONG = 2**31  # seconds: more than the column holds (and a tick a century away)


def test_an_interval_longer_than_the_column_holds_is_refused_naming_it() -> None:
    """At settings load (``delayq.E032``), by ``periodic.check`` (the admin form) and so by
    ``replace``: 4,000,000,000 s used to be accepted, then every keeper pass logged that its
    tick was more than 100 years away and it never ticked."""
    most = schedules.MAX_INTERVAL
    assert most == 2**31 - 1 and timedelta(seconds=most) < timedelta(
        seconds=validation.MAX_DELAY_SECONDS)
    for seconds in (TOO_LONG, 4_000_000_000):
        [problem] = conf.settings_problems({"x": {"callable": "tests.jobs.noop",
                                                  "interval": seconds}})
        assert "DELAYQ['SCHEDULES']['x']" in problem and "not %d" % seconds in problem
        assert "from 1 to 2147483647" in problem
    assert conf.settings_problems({"x": {"callable": "tests.jobs.noop", "interval": most}}) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_dq")
def test_the_admin_form_refuses_an_interval_longer_than_the_column_holds() -> None:
    client = staff_client("view_schedule", "add_schedule", "change_schedule")
    page = client.post("/admin/django_delayq/schedule/add/",
                       {**FORM, "cron": "", "interval_seconds": "4000000000"})
    assert page.status_code == 200 and "not 4000000000" in page.content.decode()
    assert not Schedule.objects.exists()
