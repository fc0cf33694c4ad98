"""A cancel (or a replace) inside an open transaction, of a job whose row another
process committed but whose send to Redis has not landed yet: the row decides
(``CANCELLED``), and Redis holds the job back should its send land before the
canceller's commit, so no worker can claim it while its row still reads ``scheduled``
to everyone else. After the commit the job is gone from Redis; after a rollback it waits
in Redis until the hold ends, then runs as scheduled. Real Redis, real database."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_delayq import cancel, schedule
from django_delayq.core.connection import get_engine
from django_delayq.core.workflows import HOLD_MS
from django_delayq.engine import CancelOutcome, NewJob
from django_delayq.models import Job, JobStatus

pytestmark = pytest.mark.django_db(transaction=True)


def _unsent(settings, *args: object, **options: object) -> str:  # type: ignore[no-untyped-def]
    """A job whose row is committed and whose send has not landed (Redis unreachable at
    its commit: the row waits in the outbox, as one whose send is still under way)."""
    reachable = settings.DELAYQ["REDIS_URL"]
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    try:
        job_id = schedule("tests.jobs.noop", *args, **options).id  # type: ignore[arg-type]
    finally:
        settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": reachable}
    assert get_engine().inspect("default", job_id).place == ""
    return job_id


def _send_lands(job_id: str) -> None:
    """The other process's send of ``job_id`` lands: due at once, as schedule() sends it."""
    get_engine().enqueue("default", [NewJob(id=job_id)])


def _claimable() -> list[str]:
    return [j.id for j in get_engine().claim("default", 50, 30_000).jobs]


def test_a_cancel_in_an_open_transaction_keeps_a_send_landing_meanwhile_from_a_claim(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    job_id = _unsent(delayq_settings, 1)
    with transaction.atomic():
        assert cancel(job_id) is CancelOutcome.CANCELLED
        _send_lands(job_id)
        assert job_id not in _claimable()  # its row still reads scheduled to a worker
    assert get_engine().inspect("default", job_id).place == ""  # the cancel after commit
    assert Job.objects.get(pk=job_id).status == JobStatus.CANCELLED


def test_a_replace_in_an_open_transaction_holds_the_replaced_job_back_too(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    old = _unsent(delayq_settings, 1, key="k", on_conflict="replace")
    with transaction.atomic():
        new = schedule("tests.jobs.noop", 2, key="k", on_conflict="replace", delay=3600).id
        _send_lands(old)
        assert old not in _claimable()
    assert get_engine().inspect("default", old).place == ""
    assert Job.objects.get(pk=old).status == JobStatus.CANCELLED
    assert get_engine().inspect("default", new).place == "pending"


def test_a_rolled_back_cancel_leaves_the_job_to_run_when_the_hold_ends(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    job_id = _unsent(delayq_settings, 1)
    before = get_engine().time_ms()
    with pytest.raises(RuntimeError), transaction.atomic():
        assert cancel(job_id) is CancelOutcome.CANCELLED
        raise RuntimeError("rolled back")
    assert Job.objects.get(pk=job_id).status == JobStatus.SCHEDULED
    _send_lands(job_id)
    loc = get_engine().inspect("default", job_id)
    assert loc.place == "pending" and before + HOLD_MS <= (loc.score_ms or 0)
    assert (loc.score_ms or 0) <= get_engine().time_ms() + HOLD_MS
