"""Periodic schedules on a real Redis and database (core/periodic.py): one job per tick
(the key), the next tick created when a worker starts a tick's job, the missed-run
policies after downtime, settings sync, and admin edits that take effect on the next tick.
"now" is passed where a test needs another time; nothing patches the clock."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from django_delayq.core import periodic
from django_delayq.core.connection import get_engine
from django_delayq.exceptions import InvalidJob
from django_delayq.models import TICK_KEY_PREFIX, Job, JobStatus, Schedule
from django_delayq.testing import run_due_jobs
from tests.helpers import burst, point_at, staff_client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, ALLOWED_CALLABLES=["tests.jobs"])
    return get_engine()


def every(seconds: int, start: datetime, **extra) -> Schedule:  # type: ignore[no-untyped-def]
    return Schedule.objects.create(name="s%d" % seconds, callable_path="tests.jobs.noop",
                                   interval_seconds=seconds, start_at=start, **extra)


def ticks_of(s: Schedule) -> list[tuple[datetime, str]]:
    """(tick, status) of the schedule's tick jobs, oldest first."""
    rows = Job.objects.filter(key__startswith="%s%d:" % (TICK_KEY_PREFIX, s.pk))
    return sorted((periodic.tick_of_key(r.key), r.status) for r in rows)  # type: ignore[misc]


def test_keep_materialises_the_next_tick_once(dq) -> None:  # type: ignore[no-untyped-def]
    t0 = timezone.now().replace(microsecond=0) + timedelta(minutes=1)
    s = every(60, t0)
    first = periodic.keep(s)
    s.refresh_from_db()
    assert s.next_job_id == first and s.next_tick_at == t0
    assert periodic.keep(s) == first  # pending: nothing new
    assert periodic.materialise(s, t0, timezone.now()) == first  # same key: same job
    assert ticks_of(s) == [(t0, JobStatus.SCHEDULED)]
    assert periodic.schedule_of_key(Job.objects.get(pk=first).key) == s.pk


def test_a_started_tick_creates_the_next_one(dq) -> None:  # type: ignore[no-untyped-def]
    t0 = timezone.now().replace(microsecond=0) - timedelta(seconds=1)
    s = every(3600, t0)
    periodic.keep(s, now=t0)  # tick t0 due now (a second ago)
    assert burst() == 0
    s.refresh_from_db()
    assert ticks_of(s) == [(t0, JobStatus.SUCCEEDED), (t0 + timedelta(hours=1),
                                                       JobStatus.SCHEDULED)]
    assert s.last_tick_at == t0 and s.next_tick_at == t0 + timedelta(hours=1)


def test_a_tick_started_where_no_schedule_was_seen_yet_creates_the_next_one(  # type: ignore[no-untyped-def]
        dq, monkeypatch) -> None:
    """A worker whose last keeper pass found no schedule enabled (the first schedule was
    created since, by another process): the tick's start still creates the next tick at
    once, from the key on the job's row, not at the next keeper pass (up to 10 s on)."""
    t0 = timezone.now().replace(microsecond=0) - timedelta(seconds=1)
    s = every(3600, t0)
    periodic.keep(s, now=t0)  # tick t0 due now (a second ago)
    monkeypatch.setattr(periodic.Keeper, "active", False)  # that worker's view
    assert run_due_jobs(now=timezone.now()) == 1  # the tick's start, no keeper pass
    s.refresh_from_db()
    assert ticks_of(s) == [(t0, JobStatus.SUCCEEDED), (t0 + timedelta(hours=1),
                                                       JobStatus.SCHEDULED)]


def downtime(missed: str) -> tuple[Schedule, datetime, datetime]:
    """A schedule whose tick job was created at t0 for t0+60 s; ``now`` is 10 minutes on."""
    t0 = timezone.now().replace(microsecond=0)
    s = every(60, t0, missed=missed)
    periodic.keep(s, now=t0 + timedelta(seconds=1))
    s.refresh_from_db()
    return s, t0, t0 + timedelta(minutes=10, seconds=30)


def test_skip_cancels_a_tick_job_left_over_from_downtime(dq) -> None:  # type: ignore[no-untyped-def]
    s, t0, now = downtime("skip")
    periodic.keep(s, now=now)
    assert ticks_of(s) == [(t0 + timedelta(seconds=60), JobStatus.CANCELLED),
                           (t0 + timedelta(minutes=11), JobStatus.SCHEDULED)]


def test_once_lets_the_left_over_tick_run_once_then_goes_on_in_the_future(dq) -> None:  # type: ignore[no-untyped-def]
    s, t0, now = downtime("once")
    assert periodic.keep(s, now=now) == s.next_job_id  # left to run, late
    Job.objects.filter(pk=s.next_job_id).update(status=JobStatus.SUCCEEDED)  # as if it ran
    periodic.keep(s, now=now)
    assert ticks_of(s) == [(t0 + timedelta(seconds=60), JobStatus.SUCCEEDED),
                           (t0 + timedelta(minutes=11), JobStatus.SCHEDULED)]


def test_a_lost_tick_job_comes_back_under_its_policy(dq) -> None:  # type: ignore[no-untyped-def]
    for missed, expected in (("once", timedelta(minutes=10)), ("skip", timedelta(minutes=11))):
        s, t0, now = downtime(missed)
        Job.objects.filter(pk=s.next_job_id).delete()  # lost row
        periodic.keep(s, now=now)
        assert ticks_of(s) == [(t0 + expected, JobStatus.SCHEDULED)], missed
        s.refresh_from_db()
        assert Job.objects.get(pk=s.next_job_id).run_at >= now - timedelta(seconds=1)
        s.delete()


def test_settings_schedules_are_synced_and_keep_their_enabled_flag(dq, settings) -> None:  # type: ignore[no-untyped-def]
    nightly = {"callable": "tests.jobs.noop", "cron": "0 2 * * *", "timezone": "Europe/Berlin"}
    settings.DELAYQ = {**settings.DELAYQ, "SCHEDULES": {"nightly": nightly}}
    periodic.sync_from_settings()
    s = Schedule.objects.get(name="nightly")
    assert (s.from_settings, s.cron, s.time_zone, s.enabled) == (True, "0 2 * * *",
                                                                 "Europe/Berlin", True)
    Schedule.objects.filter(pk=s.pk).update(enabled=False)  # an operator disabled it
    settings.DELAYQ = {**settings.DELAYQ, "SCHEDULES": {"nightly": {**nightly,
                                                                    "cron": "0 3 * * *"}}}
    periodic.sync_from_settings()
    s.refresh_from_db()
    assert (s.cron, s.enabled, s.version) == ("0 3 * * *", False, 2)
    settings.DELAYQ = {**settings.DELAYQ, "SCHEDULES": {}}
    Schedule.objects.filter(pk=s.pk).update(enabled=True)
    periodic.sync_from_settings()
    assert not Schedule.objects.get(pk=s.pk).enabled  # gone from settings: disabled


def test_an_admin_edit_replaces_the_future_tick_and_disabling_cancels_it(dq) -> None:  # type: ignore[no-untyped-def]
    client = staff_client("view_schedule", "change_schedule")
    t0 = timezone.now().replace(microsecond=0) + timedelta(minutes=5)
    s = every(600, t0)
    old = periodic.keep(s)
    url = "/admin/django_delayq/schedule/%d/change/" % s.pk
    form = {"name": s.name, "callable_path": "tests.jobs.noop", "args": "[1]",
            "kwargs": "{}", "queue": "", "priority": "0", "cron": "",
            "interval_seconds": "600", "time_zone": "UTC", "start_at_0": "", "start_at_1": "",
            "end_at_0": "", "end_at_1": "", "jitter_seconds": "0", "missed": "skip",
            "enabled": "on"}
    assert client.post(url, {**form, "cron": "*/5 * * * *", "interval_seconds": ""}
                       ).status_code == 302
    s.refresh_from_db()
    assert Job.objects.get(pk=old).status == JobStatus.CANCELLED
    new = Job.objects.get(pk=s.next_job_id)
    assert (new.status, new.args, s.version) == (JobStatus.SCHEDULED, [1], 2)
    assert new.scheduled_for.minute % 5 == 0 and new.scheduled_for > timezone.now()
    bad = client.post(url, {**form, "cron": "not cron"})
    assert bad.status_code == 200 and b"cron" in bad.content
    del form["enabled"]
    assert client.post(url, form).status_code == 302
    s.refresh_from_db()
    assert Job.objects.get(pk=new.pk).status == JobStatus.CANCELLED
    assert not s.enabled and periodic.keep(s) is None


def test_the_admin_needs_the_schedule_permissions(dq) -> None:  # type: ignore[no-untyped-def]
    client = staff_client()
    assert client.get("/admin/django_delayq/schedule/").status_code == 403


def test_the_admin_list_shows_the_next_tick_and_links_its_job(dq) -> None:  # type: ignore[no-untyped-def]
    s = every(60, timezone.now().replace(microsecond=0) + timedelta(minutes=1))
    job_id = periodic.keep(s)
    page = staff_client("view_schedule").get("/admin/django_delayq/schedule/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/admin/django_delayq/job/%s/change/" % job_id in html and "every 60 s" in html
    settings_row = Schedule.objects.create(name="from-settings", callable_path="tests.jobs.noop",
                                           interval_seconds=5, from_settings=True)
    form = staff_client_again("view_schedule", "change_schedule").get(
        "/admin/django_delayq/schedule/%d/change/" % settings_row.pk).content.decode()
    assert 'name="enabled"' in form and 'name="callable_path"' not in form


def staff_client_again(*codenames: str):  # type: ignore[no-untyped-def]
    from django.contrib.auth.models import User

    User.objects.filter(username="staff").delete()
    return staff_client(*codenames)


def test_delayq_status_lists_schedules_with_their_next_tick(dq) -> None:  # type: ignore[no-untyped-def]
    from io import StringIO

    from django.core.management import call_command

    t0 = timezone.now().replace(microsecond=0) + timedelta(minutes=1)
    periodic.keep(every(60, t0))
    out = StringIO()
    call_command("delayq_status", stdout=out)
    line = next(x for x in out.getvalue().splitlines() if x.strip().startswith("s60"))
    assert "enabled" in line and "every 60s" in line and t0.isoformat() in line
    off = every(30, t0)
    periodic.keep(off)
    off.refresh_from_db()
    off.enabled = False
    off.save()  # a plain save: its tick fields stay as they were, no tick is next
    out = StringIO()
    call_command("delayq_status", stdout=out)
    line = next(x for x in out.getvalue().splitlines() if x.strip().startswith("s30"))
    assert "disabled" in line and line.endswith("next tick -")


def test_delayq_status_escapes_the_control_characters_of_a_schedule(dq) -> None:  # type: ignore[no-untyped-def]
    """A schedule's name, rule and zone are anyone's with ``add_schedule``: printed as
    their Python escapes, as a worker's id is (docs/status.md), never raw to the terminal."""
    from io import StringIO

    from django.core.management import call_command

    hostile = "evil\x1b]0;TITLE\x07\x1b[2Jsched\rX\u202e"
    Schedule.objects.create(name=hostile, callable_path="tests.jobs.noop", enabled=False,
                            cron="0 2 * * *\x1b[31m", time_zone="UTC\x1b[8m")
    out = StringIO()
    call_command("delayq_status", stdout=out)
    text = out.getvalue()
    assert not {"\x1b", "\x07", "\r", "\u202e"} & set(text), text
    assert "evil\\x1b]0;TITLE\\x07\\x1b[2Jsched\\rX\\u202e" in text
    assert "0 2 * * *\\x1b[31m" in text and "UTC\\x1b[8m" in text


def test_a_tick_created_from_a_stale_version_is_cancelled_and_replace_bumps_once(dq) -> None:  # type: ignore[no-untyped-def]
    t0 = timezone.now().replace(microsecond=0) + timedelta(minutes=5)
    s = every(600, t0)
    periodic.keep(s)
    stale = Schedule.objects.get(pk=s.pk)  # a keeper pass that read version 1
    racer = Schedule.objects.get(pk=s.pk)  # and an edit that read it too
    assert periodic.replace(s) is True
    assert periodic.replace(racer) is False  # a racing replace of version 1: no second bump
    assert periodic.advance(stale, t0) is None  # its job for t0 + 600 s, version 1
    s.refresh_from_db()
    assert s.version == 2
    v1 = Job.objects.filter(key__startswith="%s%d:1:" % (TICK_KEY_PREFIX, s.pk))
    assert sorted(v1.values_list("status", flat=True)) == [JobStatus.CANCELLED] * 2
    assert Job.objects.get(pk=s.next_job_id).status == JobStatus.SCHEDULED


def test_the_keeper_pass_syncs_settings_then_keeps_each_schedule_ticking(dq, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "SCHEDULES": {
        "minutely": {"callable": "tests.jobs.noop", "interval": 60}}}
    retention_passes = []
    keeper = periodic.Keeper(every_s=3600)
    keeper.tick(lambda: retention_passes.append(1))
    s = Schedule.objects.get(name="minutely")
    assert s.from_settings and Job.objects.get(pk=s.next_job_id).status == JobStatus.SCHEDULED
    Job.objects.filter(pk=s.next_job_id).delete()  # lost
    keeper.tick(lambda: retention_passes.append(1))  # within every_s: retention only
    assert not Job.objects.filter(pk=s.next_job_id).exists() and len(retention_passes) == 2
    periodic.Keeper(every_s=0).tick()
    s.refresh_from_db()
    assert Job.objects.get(pk=s.next_job_id).status == JobStatus.SCHEDULED


def test_jitter_delays_the_due_time_but_not_the_tick(dq) -> None:  # type: ignore[no-untyped-def]
    t0 = timezone.now().replace(microsecond=0) + timedelta(minutes=1)
    s = every(3600, t0, jitter_seconds=30)
    row = Job.objects.get(pk=periodic.keep(s))
    assert periodic.tick_of_key(row.key) == t0
    assert t0 <= row.run_at <= t0 + timedelta(seconds=30)


@pytest.mark.parametrize(("extra", "bad"), [
    ({"priority": 500}, "500"),
    ({"callable_path": "tests.jobs.add", "args": [1, 2, 3]}, "tests.jobs.add"),
])
def test_a_definition_no_tick_could_run_is_refused_when_saved(dq, extra, bad) -> None:  # type: ignore[no-untyped-def]
    s = Schedule(**{"name": "bad", "callable_path": "tests.jobs.noop", "interval_seconds": 60,
                    **extra})
    with pytest.raises(InvalidJob, match=bad):
        periodic.check(s)
