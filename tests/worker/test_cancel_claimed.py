"""A cancel asked while a job was claimed but not started sticks: a job a shutdown or a
limit handed back to Redis keeps its cancel mark, and the worker that claims it again ends
it cancelled without running it."""

from __future__ import annotations

import pytest

from django_delayq import cancel, schedule
from django_delayq.core.connection import get_engine
from django_delayq.engine import CancelOutcome
from django_delayq.models import Job, JobStatus
from tests.helpers import burst

pytestmark = pytest.mark.django_db(transaction=True)


def test_job_cancelled_while_claimed_then_handed_back_never_runs(  # type: ignore[no-untyped-def]
        delayq_settings, tmp_path) -> None:
    marker = tmp_path / "ran.txt"
    handle = schedule("tests.jobs.record", str(marker), "ran")
    engine = get_engine()
    claimed = engine.claim("default", 10, 60_000).jobs
    assert [job.id for job in claimed] == [handle.id]
    assert cancel(handle.id) is CancelOutcome.ALREADY_RUNNING  # in flight: marked
    assert engine.release("default", claimed) == [True]  # a draining worker hands it back

    assert burst() == 0
    row = Job.objects.get(pk=handle.id)
    assert row.status == JobStatus.CANCELLED
    assert "before it started" in row.last_error
    assert not marker.exists()
    assert engine.inspect("default", handle.id).place == ""  # forgotten by Redis
