"""Tick computation (core/schedules.py) through both daylight-saving changes of
Europe/Berlin and America/New_York, as Debian's cron: a fixed time in the skipped hour runs
once right after the gap, a fixed time in the repeated hour once; wildcard-hour and
interval schedules fire every real hour or interval. "now" is passed, no clock is patched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_delayq.core.schedules import Rule, check_rule, last_tick, next_tick, zone_of
from django_delayq.exceptions import InvalidJob

# (zone, the change's local date, "spring" or "autumn")
CHANGES = [("Europe/Berlin", (2026, 3, 29)), ("Europe/Berlin", (2026, 10, 25)),
           ("America/New_York", (2026, 3, 8)), ("America/New_York", (2026, 11, 1))]


def rule(cron: str = "", zone: str = "UTC", interval: int | None = None) -> Rule:
    return Rule(cron=cron, interval_s=interval, zone=zone_of(zone),
                anchor=datetime(2026, 1, 1, tzinfo=UTC))


def ticks(r: Rule, start: datetime, count: int) -> list[str]:
    out, at = [], start
    for _ in range(count):
        tick = next_tick(r, at)
        assert tick is not None and tick > at
        out.append(tick.strftime("%d %H:%M"))
        at = tick
    return out


def series(r: Rule, start: datetime, count: int) -> list[datetime]:
    out, at = [], start
    for _ in range(count):
        tick = next_tick(r, at)
        assert tick is not None
        out.append(tick)
        at = tick
    return out


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)


# The daily ticks from the day before the change, in UTC.
DAILY = {
    ("Europe/Berlin", "30 2 * * *", 3): ["28 01:30", "29 01:00", "30 00:30"],  # 02:30 -> 03:00
    ("Europe/Berlin", "30 1 * * *", 3): ["28 00:30", "29 00:30", "29 23:30"],
    ("Europe/Berlin", "30 2 * * *", 10): ["24 00:30", "25 00:30", "26 01:30"],  # once, CEST
    ("Europe/Berlin", "30 1 * * *", 10): ["23 23:30", "24 23:30", "26 00:30"],
    ("America/New_York", "30 2 * * *", 3): ["07 07:30", "08 07:00", "09 06:30"],  # -> 03:00
    ("America/New_York", "30 1 * * *", 3): ["07 06:30", "08 06:30", "09 05:30"],
    ("America/New_York", "30 2 * * *", 11): ["31 06:30", "01 07:30", "02 07:30"],
    ("America/New_York", "30 1 * * *", 11): ["31 05:30", "01 05:30", "02 06:30"],  # once, EDT
}


@pytest.mark.parametrize("zone,cron,month", list(DAILY))
def test_daily_fixed_times_run_once_per_day_through_the_change(zone, cron, month) -> None:  # type: ignore[no-untyped-def]
    day = next(d for z, d in CHANGES if z == zone and d[1] == month)
    start = utc(*day, 0, 0) - timedelta(days=1, hours=3)
    assert ticks(rule(cron, zone), start, 3) == DAILY[(zone, cron, month)]


@pytest.mark.parametrize("zone,day", CHANGES)
def test_hourly_fires_every_real_hour_through_the_change(zone, day) -> None:  # type: ignore[no-untyped-def]
    start = utc(*day, 0, 0)
    got = series(rule("0 * * * *", zone), start, 14)  # the change lies within
    assert [b - a for a, b in zip(got, got[1:], strict=False)] == [timedelta(hours=1)] * 13


@pytest.mark.parametrize("zone,day", CHANGES)
@pytest.mark.parametrize("every", ["*/15 * * * *", "interval"])
def test_every_15_minutes_fires_every_real_15_minutes(zone, day, every) -> None:  # type: ignore[no-untyped-def]
    r = rule(every, zone) if every != "interval" else rule("", zone, interval=900)
    seen = series(r, utc(*day, 0, 0), 40)  # 10 hours across the change
    assert [b - a for a, b in zip(seen, seen[1:], strict=False)] == [timedelta(minutes=15)] * 39


def test_asked_inside_the_repeated_hour_the_answer_is_strictly_later() -> None:
    # Berlin, 25 Oct 2026: 02:10 CET (01:10 UTC) is after 02:30 CEST (00:30 UTC) already ran.
    r = rule("30 2 * * *", "Europe/Berlin")
    assert next_tick(r, utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 26, 1, 30)


def test_aliases_and_start_end() -> None:
    r = Rule(cron="@daily", interval_s=None, zone=zone_of("UTC"), anchor=utc(2026, 1, 1),
             start=utc(2026, 5, 1, 12), end=utc(2026, 5, 3, 12))
    assert next_tick(r, utc(2026, 1, 1)) == utc(2026, 5, 2)
    assert next_tick(r, utc(2026, 5, 2)) == utc(2026, 5, 3)
    assert next_tick(r, utc(2026, 5, 3)) is None


def test_last_tick_of_a_long_downtime() -> None:
    r = rule(interval=60)
    assert last_tick(r, utc(2026, 1, 1), utc(2026, 2, 1, 0, 0, 30)) == utc(2026, 2, 1)
    assert last_tick(rule("0 2 * * *"), utc(2026, 1, 1, 3), utc(2026, 1, 5, 1)) == \
        utc(2026, 1, 4, 2)
    assert last_tick(r, utc(2026, 1, 1), utc(2026, 1, 1, 0, 0, 30)) is None


@pytest.mark.parametrize("cron,interval,zone,bad", [
    ("", None, "UTC", "neither"), ("0 2 * * *", 60, "UTC", "both"),
    ("0 2 * *", None, "UTC", "'0 2 * *'"), ("61 2 * * *", None, "UTC", "'61 2 * * *'"),
    ("", 0, "UTC", "0"), ("@daily", None, "Mars/Olympus", "'Mars/Olympus'"),
])
def test_bad_definitions_name_the_bad_value(cron, interval, zone, bad) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=bad.replace("*", r"\*")):
        check_rule(cron, interval, zone)


@pytest.mark.parametrize("zone,day", CHANGES)
@pytest.mark.parametrize("cron", ["0 * * * *", "*/15 * * * *", "30 1 * * *"])
def test_the_same_ticks_under_freezegun(zone, day, cron) -> None:  # type: ignore[no-untyped-def]
    """freezegun's datetime drops ``fold``: the ticks must not depend on it."""
    from freezegun import freeze_time

    r = rule(cron, zone)
    plain = series(r, utc(*day, 0, 0), 30)
    with freeze_time(utc(*day, 0, 0)):
        assert series(r, utc(*day, 0, 0), 30) == plain
