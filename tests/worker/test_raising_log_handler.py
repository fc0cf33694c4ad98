"""A project's log handler that raises (``SystemExit`` included) on the worker's own lines
stops neither a drain nor the lease recovery's records: the drain's wind-down comes before
its line, and the lines of the signal relay, the supervisor and the recovery are written
with ``logtext.logged`` (docs/signals.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.housekeeping import LeaseRecovery
from tests.worker.test_worker_inprocess import one_job_held

pytestmark = pytest.mark.django_db(transaction=True)


class Raising(logging.Handler):
    """Raises on every record whose text holds ``needle``."""

    def __init__(self, needle: str) -> None:
        super().__init__(logging.DEBUG)
        self.needle, self.raised = needle, 0

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.raised += 1
            raise SystemExit("a broken handler")


@pytest.fixture
def raising() -> Iterator[object]:
    """``attach(needle)`` -> a ``Raising`` handler on the package's logger, at DEBUG."""
    package = logging.getLogger("django_delayq")
    attached: list[Raising] = []
    level = package.level

    def attach(needle: str) -> Raising:
        handler = Raising(needle)
        package.addHandler(handler)
        package.setLevel(logging.DEBUG)
        attached.append(handler)
        return handler
    yield attach
    for handler in attached:
        package.removeHandler(handler)
    package.setLevel(level)


def test_a_drain_whose_line_raises_still_drains(delayq_settings, tmp_path, raising) -> None:  # type: ignore[no-untyped-def]
    handler = raising("draining")  # type: ignore[operator]
    later = schedule("tests.jobs.noop", delay=1)
    with one_job_held(tmp_path) as (worker, h, gate, thread):
        worker.request_stop()  # the handler raised inside: it was the drain's end
        assert handler.raised == 1 and worker.draining
        gate.touch()
        thread.join(60)
        assert not thread.is_alive()
        assert h.status == JobStatus.SUCCEEDED and (tmp_path / "runs").read_text().count(
            "slow") == 1
        assert later.status == JobStatus.SCHEDULED  # a draining worker claims nothing more


def test_recovery_records_every_lost_attempt_when_its_line_raises(delayq_settings, raising) -> None:  # type: ignore[no-untyped-def]
    handler = raising("lease expired")  # type: ignore[operator]
    handles = [schedule("tests.jobs.noop", max_attempts=3) for _ in range(3)]
    engine = get_engine()
    claimed = engine.claim("default", 3, 50).jobs
    assert len(claimed) == 3
    engine.mark_started(claimed)
    Job.objects.filter(pk__in=[h.id for h in handles]).update(
        attempts=1, started_at=timezone.now() - timedelta(seconds=2), worker_id="victim:1")
    audit = AuditWriter()
    recovery = LeaseRecovery(engine, get_settings(), audit)
    deadline = time.monotonic() + 30
    while JobAttempt.objects.count() < 3:  # until the 50 ms leases are taken back
        assert time.monotonic() < deadline, (handler.raised, JobAttempt.objects.count())
        time.sleep(0.05)
        recovery.recover("default")
        audit.flush()
    assert handler.raised == 3
    assert {h.job.status for h in handles} == {JobStatus.RETRYING}
