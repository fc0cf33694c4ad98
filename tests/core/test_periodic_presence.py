"""The keeper pass makes sure a schedule's pending tick job is in Redis, not only that its
row exists (core/tick_presence.py): a tick job whose send failed is enqueued again at
once, and never one that may have run or whose own send may still be on its way."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_delayq.core import periodic, tick_presence
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus, Schedule
from tests.core.test_periodic import dq as _dq  # noqa: F401 - a fixture, used by name
from tests.core.test_periodic import every

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("_dq")]


def lost_send(seconds_ago: float = 3.0) -> tuple[Schedule, str]:
    """A schedule whose pending tick job's row exists but Redis lacks it (its send
    failed), the row written ``seconds_ago``."""
    s = every(60, timezone.now().replace(microsecond=0) + timedelta(minutes=1))
    job_id = periodic.keep(s)
    assert job_id is not None
    assert get_engine().purge_pending("default") == [job_id]  # as if never sent
    Job.objects.filter(pk=job_id).update(
        updated_at=timezone.now() - timedelta(seconds=seconds_ago))
    s.refresh_from_db()
    return s, job_id


def place(job_id: str) -> str:
    return get_engine().inspect("default", job_id).place


def test_the_keeper_pass_enqueues_a_pending_tick_job_redis_lacks() -> None:
    s, job_id = lost_send()
    due = Job.objects.get(pk=job_id).run_at
    assert periodic.keep_all() == 0
    loc = get_engine().inspect("default", job_id)
    assert loc.place == "pending" and loc.score_ms == int(due.timestamp() * 1000)
    assert Job.objects.get(pk=job_id).status == JobStatus.SCHEDULED
    s.refresh_from_db()
    assert s.next_job_id == job_id and s.last_job_id == ""  # the same tick, nothing skipped
    assert tick_presence.put_back([job_id]) == (set(), 0)  # in Redis now: nothing to do


def test_a_row_written_moments_ago_is_looked_at_again_not_enqueued() -> None:
    _, job_id = lost_send(seconds_ago=0)
    assert tick_presence.put_back([job_id]) == ({job_id}, 0)  # its send may be on its way
    assert place(job_id) == ""
    Job.objects.filter(pk=job_id).update(updated_at=timezone.now() - timedelta(seconds=3))
    assert tick_presence.put_back([job_id]) == (set(), 1)
    assert place(job_id) == "pending"


def test_a_tick_a_worker_started_is_never_enqueued_again() -> None:
    s, job_id = lost_send()
    # tick_started wrote it as the schedule's last tick before its function ran; its
    # row still says scheduled (the audit flush lags) and Redis no longer holds it (acked)
    Schedule.objects.filter(pk=s.pk).update(last_job_id=job_id, last_tick_at=s.next_tick_at)
    assert tick_presence.put_back([job_id]) == (set(), 0)
    assert place(job_id) == ""


def test_only_live_scheduled_rows_of_enabled_schedules_are_enqueued() -> None:
    s, job_id = lost_send()
    Job.objects.filter(pk=job_id).update(status=JobStatus.RUNNING)
    assert tick_presence.put_back([job_id]) == (set(), 0)
    Job.objects.filter(pk=job_id).update(status=JobStatus.SCHEDULED)
    Schedule.objects.filter(pk=s.pk).update(enabled=False)
    assert tick_presence.put_back([job_id]) == (set(), 0)
    assert place(job_id) == ""


def test_a_watched_tick_job_is_forgotten_once_decided_and_kept_while_young() -> None:
    _, job_id = lost_send(seconds_ago=0)
    tick_presence.watch([job_id])
    assert tick_presence.confirm(force=True) == 0
    assert job_id in tick_presence.watched()  # too young to tell: looked at again
    Job.objects.filter(pk=job_id).update(updated_at=timezone.now() - timedelta(seconds=3))
    assert tick_presence.confirm(force=True) == 1
    assert job_id not in tick_presence.watched() and place(job_id) == "pending"
