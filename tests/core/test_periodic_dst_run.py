"""Schedules run through both DST changes of Europe/Berlin and America/New_York the way
the tick tables of test_periodic_ticks.py say, end to end: frozen time (freezegun) moved
from tick to tick, each tick's job run by the test worker, whose start of it creates the
next tick's job (``tick_started``), as a real worker does. Each tick runs once."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone
from freezegun import freeze_time

from django_delayq.core import periodic
from django_delayq.models import TICK_KEY_PREFIX, Job, JobStatus, Schedule
from django_delayq.pytest_plugin import delayq  # noqa: F401
from tests.core.test_periodic_ticks import CHANGES, DAILY, utc

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def project(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "ALLOWED_CALLABLES": ["tests.jobs"]}
    return delayq_settings


def run_ticks(dq, start: datetime, count: int, **definition) -> list[datetime]:  # type: ignore[no-untyped-def]
    """Create the schedule at ``start`` (frozen), then ``count`` times: note its next
    tick, move the clock just past it and run what is due. Returns the ticks noted."""
    seen: list[datetime] = []
    with freeze_time(start):
        s = Schedule.objects.create(name="dst", callable_path="tests.jobs.noop", **definition)
        assert periodic.keep(s) is not None
        for _ in range(count):
            s.refresh_from_db()
            assert s.next_tick_at is not None
            seen.append(s.next_tick_at)
            assert dq.advance(s.next_tick_at + timedelta(seconds=1) - timezone.now()) == 1
    rows = Job.objects.filter(key__startswith="%s%d:" % (TICK_KEY_PREFIX, s.pk))
    ran = sorted(periodic.tick_of_key(r.key) for r in rows  # type: ignore[type-var]
                 if r.status == JobStatus.SUCCEEDED)
    assert ran == seen  # every tick noted ran, once
    assert rows.filter(status=JobStatus.SCHEDULED).count() == 1  # and the next one waits
    return seen


@pytest.mark.parametrize("zone,cron,month", list(DAILY))
def test_daily_fixed_times_through_the_change(project, delayq, zone, cron, month) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    day = next(d for z, d in CHANGES if z == zone and d[1] == month)
    start = utc(*day, 0, 0) - timedelta(days=1, hours=3)
    seen = run_ticks(delayq, start, 3, cron=cron, time_zone=zone)
    assert [t.strftime("%d %H:%M") for t in seen] == DAILY[(zone, cron, month)]


@pytest.mark.parametrize("zone,day", CHANGES)
@pytest.mark.parametrize("cron,count,step", [("0 * * * *", 14, timedelta(hours=1)),
                                             ("*/15 * * * *", 40, timedelta(minutes=15))])
def test_hourly_and_every_15_minutes_through_the_change(project, delayq, zone, day, cron,  # type: ignore[no-untyped-def]  # noqa: F811
                                                        count, step) -> None:
    seen = run_ticks(delayq, utc(*day, 0, 0) + timedelta(seconds=1), count, cron=cron,
                     time_zone=zone)
    assert [b - a for a, b in zip(seen, seen[1:], strict=False)] == [step] * (count - 1)
    assert seen[0] <= utc(*day, 1, 0) and seen[-1] >= utc(*day, 9, 0)  # the change inside
