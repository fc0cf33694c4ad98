"""``delayq_worker`` processes (plain, and supervised: ``--processes``) with ``USE_TZ =
False`` and ``TIME_ZONE = "Europe/Berlin"`` (``naive_settings.py``), as a project without
``USE_TZ`` runs them: ``wait()`` returns, the rows say how their jobs ended, with the local
wall time of their instants (tests/worker/test_naive_rows.py covers each kind of row)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.exceptions import JobFailed
from django_delayq.models import JobAttempt, JobStatus
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import point_at
from tests.worker.conftest import wait_or_dump, worker_starter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


@pytest.fixture
def start(settings, redis_server, tmp_path) -> Iterator:  # type: ignore[no-untyped-def,type-arg]
    point_at(settings, redis_server)
    settings.USE_TZ, settings.TIME_ZONE = False, "Europe/Berlin"
    yield from worker_starter(settings, tmp_path, "tests.worker.naive_settings")


def wall(moment: datetime) -> datetime:
    return timezone.localtime(moment).replace(tzinfo=None)


@pytest.mark.parametrize("args", [(), ("--processes", "1")], ids=["threads", "processes"])
def test_a_worker_process_writes_its_rows(start, args) -> None:  # type: ignore[no-untyped-def]
    before = datetime.now(UTC)
    ok = schedule("tests.jobs.add", 2, 3)
    dead = schedule("tests.jobs.boom", "bad", max_attempts=1)
    proc = start(*args)
    assert ok.wait(timeout=60) == 5
    with pytest.raises(JobFailed):
        dead.wait(timeout=60)
    after = datetime.now(UTC)
    proc.send_signal(signal.SIGTERM)
    assert wait_or_dump(proc, 60) == EXIT_OK
    for h, status in ((ok, JobStatus.SUCCEEDED), (dead, JobStatus.DEAD)):
        row = h.job
        assert (row.status, row.attempts) == (status, 1)
        for moment in (row.started_at, row.finished_at, row.updated_at):
            assert moment is not None and wall(before) <= moment <= wall(after), row
    [attempt] = JobAttempt.objects.filter(job_id=dead.id)
    assert attempt.finished_at == dead.job.finished_at
