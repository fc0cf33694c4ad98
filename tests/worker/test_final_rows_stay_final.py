"""A final row stays final: a lease taken back after its job settled (Redis lost the ack
in a failover and still holds the job in flight) must not reopen the row."""

from __future__ import annotations

import pytest

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
