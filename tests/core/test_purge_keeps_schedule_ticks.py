"""A purge leaves periodic schedules' next ticks alone: their pending jobs wait on, due
as before, their rows untouched, and the schedules go on; the purge says how many it
kept. (A purged tick job cannot be created again: its id comes from its tick's key, so
the schedule skipped that tick and showed it as its last one, in the future.)"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_delayq import purge_queue
from django_delayq.core import periodic
from django_delayq.core.api import JobSpec, schedule_many
from django_delayq.core.connection import get_engine
from django_delayq.core.queues import PurgeReport, purge_queue_report
from django_delayq.models import Job, JobStatus, Schedule
from tests import jobs
from tests.core.test_periodic import dq as _dq  # noqa: F401 - a fixture, used by name
from tests.core.test_periodic import every
from tests.helpers import burst

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("_dq")]


def ticking(seconds: int, first_tick_in: timedelta) -> tuple[Schedule, str]:
    first = timezone.now().replace(microsecond=0) + first_tick_in
    s = every(seconds, first)
    job_id = periodic.keep(s, now=min(first, timezone.now()))  # a past one: due now
    assert job_id is not None
    s.refresh_from_db()
    return s, job_id


def test_a_purge_keeps_the_pending_tick_job_and_the_schedule_goes_on() -> None:
    s, tick = ticking(3600, timedelta(minutes=5))
    due_ms = get_engine().inspect("default", tick).score_ms
    others = schedule_many(jobs.noop, [JobSpec(delay=i) for i in range(3)])
    assert purge_queue("default") == 3  # the ordinary jobs only
    row = Job.objects.get(pk=tick)
    assert (row.status, row.last_error, row.finished_at) == (JobStatus.SCHEDULED, "", None)
    loc = get_engine().inspect("default", tick)
    assert (loc.place, loc.score_ms) == ("pending", due_ms)  # waits, due as before
    assert set(Job.objects.filter(pk__in=others).values_list("status", flat=True)) == {
        JobStatus.CANCELLED}
    assert periodic.keep(s) == tick  # still the pending tick: nothing skipped
    s.refresh_from_db()
    assert s.next_job_id == tick and s.last_tick_at is None and s.last_job_id == ""
    assert get_engine().stats("default").scheduled == 1


def test_a_purge_keeps_a_disabled_schedule_s_tick_for_when_it_is_enabled_again() -> None:
    s, tick = ticking(3600, timedelta(minutes=5))
    Schedule.objects.filter(pk=s.pk).update(enabled=False)
    assert purge_queue("default") == 0
    assert Job.objects.get(pk=tick).status == JobStatus.SCHEDULED
    Schedule.objects.filter(pk=s.pk).update(enabled=True)
    s.refresh_from_db()
    assert periodic.keep(s) == tick  # the same tick, due as before: none skipped


def test_a_due_tick_kept_by_a_purge_runs_and_chains_the_next() -> None:
    s, tick = ticking(3600, timedelta(seconds=-1))  # due a second ago: ready in Redis
    schedule_many(jobs.noop, [JobSpec() for _ in range(2)])
    assert purge_queue_report("default") == PurgeReport(removed=2, ticks_kept=1)
    assert burst() == 0
    assert Job.objects.get(pk=tick).status == JobStatus.SUCCEEDED
    s.refresh_from_db()
    assert s.last_job_id == tick and s.next_job_id not in ("", tick)
    assert s.last_tick_at is not None and s.last_tick_at <= timezone.now()
    assert Job.objects.get(pk=s.next_job_id).status == JobStatus.SCHEDULED


def test_the_command_says_how_many_schedule_ticks_it_kept() -> None:
    ticking(60, timedelta(minutes=1))
    schedule_many(jobs.noop, [JobSpec()])
    out = StringIO()
    call_command("delayq_queue", "purge", "default", "--yes", stdout=out)
    assert out.getvalue() == ("default: purged 1 waiting job(s); their rows are cancelled; "
                              "kept 1 schedule tick(s) waiting\n")
