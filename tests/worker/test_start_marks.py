"""No start mark, no start: a job whose start mark cannot be written (Redis unreachable
for that moment) is not run; it goes back to Redis uncharged, its row untouched, and runs
once, as attempt 1, when marks can be written again. (A job run without its mark and then
lost with a SIGKILLed worker would look unstarted to recovery: re-run under the same
attempt number, one run missing from the audit.)"""

from __future__ import annotations

import pytest
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from django_delayq.core.api import schedule
from django_delayq.core.connection import get_engine
from django_delayq.engine.acks import AckStream
from django_delayq.engine.engine import Engine as Leases
from django_delayq.engine.outcomes import NackOutcome
from django_delayq.models import Job, JobStatus
from django_delayq.worker.outcome import LEASE_LOST
from tests.helpers import burst, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_a_job_whose_start_mark_cannot_be_written_is_not_run(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch, tmp_path) -> None:
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.record", str(out), "ran")
    mark_started = Leases.mark_started
    marks: list[tuple[str, bool, tuple[str, int]]] = []  # (id, written, its row then)

    def unreachable_once(self, jobs):  # type: ignore[no-untyped-def]
        row = Job.objects.get(pk=jobs[0].id)
        marks.append((jobs[0].id, bool(marks), (row.status, row.attempts)))
        if len(marks) == 1:
            raise RedisConnectionError("Redis unreachable for the start mark")
        return mark_started(self, jobs)

    # both ways a mark is written go through the call: the marks' connection fails
    monkeypatch.setattr(AckStream, "mark", lambda self, keys, args: False)
    monkeypatch.setattr(Leases, "mark_started", unreachable_once)
    assert burst() == 0  # the job comes due again a second later: the burst runs it then
    assert marks == [(h.id, False, (JobStatus.SCHEDULED, 0)),  # not started, not charged,
                     (h.id, True, (JobStatus.SCHEDULED, 0))]  # its row untouched
    assert [line.split()[:3] for line in out.read_text().splitlines()] == [["ran", h.id, "1"]]
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 1)
    assert get_engine().inspect("default", h.id).place == ""  # settled, gone from Redis


def test_a_run_whose_start_mark_never_reached_redis_still_counts(  # type: ignore[no-untyped-def]
        delayq_settings, tmp_path) -> None:
    """A worker started attempt 1 (its row says so), its start mark never reached Redis
    (Redis stopped before reading it), then the worker died: Redis's recovery sees an
    unstarted delivery, but the next run is attempt 2, as the row counts."""
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.record", str(out), "ran")
    first = get_engine().claim("default", 1, lease_ms=1).jobs  # its worker dies at once
    assert [(j.id, j.attempt) for j in first] == [(h.id, 1)]
    Job.objects.filter(pk=h.id).update(status=JobStatus.RUNNING, attempts=1,
                                       started_at=timezone.now())
    wait_until(lambda: [r.outcome for r in get_engine().recover("default")]
               == [NackOutcome.NOT_STARTED])  # unmarked: due again, uncharged in Redis
    assert burst() == 0
    assert [line.split()[:3] for line in out.read_text().splitlines()] == [["ran", h.id, "2"]]
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)


def test_a_lost_last_attempt_whose_mark_never_reached_redis_ends_dead(  # type: ignore[no-untyped-def]
        delayq_settings, tmp_path) -> None:
    """As above with ``max_attempts=1``: the run the row counted was the last one, so the
    job ends dead without running again, as it would have with its mark in Redis."""
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.record", str(out), "ran", max_attempts=1)
    assert [j.attempt for j in get_engine().claim("default", 1, lease_ms=1).jobs] == [1]
    Job.objects.filter(pk=h.id).update(status=JobStatus.RUNNING, attempts=1,
                                       started_at=timezone.now())
    wait_until(lambda: [r.outcome for r in get_engine().recover("default")]
               == [NackOutcome.NOT_STARTED])
    assert burst() == 0
    assert not out.exists()  # not run again
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.attempts, row.error_type) == (JobStatus.DEAD, 1, LEASE_LOST)
    assert [(a.number, a.outcome) for a in row.attempt_history.all()] == [(1, JobStatus.DEAD)]


def test_a_redis_count_past_max_attempts_alone_does_not_end_a_job(  # type: ignore[no-untyped-def]
        delayq_settings, tmp_path) -> None:
    """Only a run the row counted ends the job unrun: a count in Redis past
    ``max_attempts`` (planted there) with a row that counted nothing still runs it."""
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.record", str(out), "ran", max_attempts=1)
    get_engine().client.hset(get_engine().keys("default").attempts, h.id, 1)
    assert burst() == 0
    assert [line.split()[:2] for line in out.read_text().splitlines()] == [["ran", h.id]]
    assert Job.objects.get(pk=h.id).status == JobStatus.SUCCEEDED
