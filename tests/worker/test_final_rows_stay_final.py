"""A final row stays final: a lease taken back after its job settled (Redis lost the ack
in a failover and still holds the job in flight) must not reopen the row."""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine import NewJob
from django_delayq.models import Job, JobStatus
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.housekeeping import LeaseRecovery
from tests.helpers import burst, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_recovered_lease_of_a_settled_job_leaves_its_row_succeeded(  # type: ignore[no-untyped-def]
        delayq_settings) -> None:
    handle = schedule("tests.jobs.add", 1, 2)
    assert burst() == 0
    assert Job.objects.get(pk=handle.id).status == JobStatus.SUCCEEDED

    # What a failover can leave: the job back in Redis, leased, its lease run out.
    engine = get_engine()
    engine.enqueue("default", [NewJob(id=handle.id)])
    assert [j.id for j in engine.claim("default", 10, 1).jobs] == [handle.id]
    wait_until(lambda: engine.stats("default").expired_leases == 1)

    audit = AuditWriter(0.05, 100)
    recovery = LeaseRecovery(engine, get_settings(), audit)

    def taken_back() -> bool:  # once this worker's calls have run unbroken half a lease
        recovery.recover("default")
        return engine.stats("default").expired_leases == 0

    wait_until(taken_back, timeout=30)
    audit.flush()
    row = Job.objects.get(pk=handle.id)
    assert (row.status, row.result) == (JobStatus.SUCCEEDED, 3)


def test_a_run_that_succeeded_after_its_job_ended_is_counted_on_the_final_row(  # type: ignore[no-untyped-def]
        delayq_settings) -> None:
    """After a loss of Redis's data a job settled there whose row had not landed may run
    again (docs/guarantees.md). The later run's success meets a final row: the row stays
    as the first run left it (status, result, worker), but counts the run (``attempts``):
    the audit shows every run. A late write about an earlier attempt changes nothing."""
    first, other = schedule("tests.jobs.add", 1, 2), schedule("tests.jobs.add", 2, 2)
    assert burst() == 0
    before = Job.objects.get(pk=first.id)
    assert (before.status, before.attempts, before.result) == ("succeeded", 1, 3)
    Job.objects.filter(pk=other.id).update(status=JobStatus.RUNNING, attempts=1)
    now = timezone.now()
    audit = AuditWriter(0.05, 100)
    for job_id in (first.id, other.id):  # one flush: one row kept by the guard, one not
        audit.update(job_id, status=JobStatus.SUCCEEDED, started_at=now, finished_at=now,
                     attempts=2, worker_id="again", updated_at=now, result=99)
    audit.flush()
    audit.update(first.id, status=JobStatus.DEAD, attempts=1, updated_at=now)  # older
    audit.flush()
    after = Job.objects.get(pk=first.id)
    assert (after.status, after.attempts, after.result, after.worker_id) == (
        "succeeded", 2, 3, before.worker_id)
    assert Job.objects.get(pk=other.id).attempts == 2
