"""After the reconciler has run, the audit rows and Redis agree: a live row's job is pending
in Redis, a dead one is in the dead set (or trimmed from it), a finished one is gone; running
the reconciler again changes nothing."""

from __future__ import annotations

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job, JobStatus
from django_delayq.testing import run_due_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def _place(job: Job) -> str:
    return get_engine().inspect(job.queue, job.id).place


def test_audit_rows_and_redis_agree_after_reconcile(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    done = schedule("tests.jobs.add", 1, 2)
    run_due_jobs()
    later = [schedule("tests.jobs.noop", i, delay=3600) for i in range(5)]
    other = schedule("tests.jobs.noop", queue="emails", delay=3600)
    cancelled = schedule("tests.jobs.noop", delay=3600)
    cancelled.cancel()
    for queue in ("default", "emails"):  # Redis loses everything (restart without AOF)
        engine.purge(queue)
    assert all(_place(h.job) == "" for h in later + [other])

    Reconciler(engine, get_settings(), ("default", "emails", "slow")).run_all(
        assume_lost=True)

    for row in Job.objects.all():
        where = _place(row)
        if row.status in (JobStatus.SCHEDULED, JobStatus.RETRYING):
            assert where == "pending", row
        elif row.status == JobStatus.DEAD:
            assert where in ("dead", ""), row  # dead jobs may be trimmed from Redis
        else:
            assert where == "", row  # succeeded and cancelled jobs are not in Redis
    assert done.job.status == JobStatus.SUCCEEDED and cancelled.status == JobStatus.CANCELLED
    # and running it again changes nothing: re-enqueue is idempotent by id
    before = engine.stats("default")
    Reconciler(engine, get_settings(), ("default", "emails", "slow")).run_all(
        assume_lost=True)
    assert engine.stats("default").scheduled == before.scheduled == 5
