"""A cancel (or a replace) inside an open transaction, of a job whose row another
process committed but whose send to Redis has not landed yet: the row decides
(``CANCELLED``), and Redis holds the job back should its send land before the
canceller's commit, so no worker can claim it while its row still reads ``scheduled``
to everyone else. After the commit the job is gone from Redis; after a rollback it waits
in Redis until the hold ends, then runs as scheduled. Real Redis, real database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from django_delayq import cancel, run_now, schedule, signals
from django_delayq.core.connection import get_engine
from django_delayq.core.workflows import HOLD_MS
from django_delayq.engine import CancelOutcome, NewJob
from django_delayq.engine.engine import MoveOutcome
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


def _during_the_cancels_update(job_id: str, then: Callable[[], None]) -> Any:
    """A query wrapper calling ``then`` just before the UPDATE that cancels ``job_id``'s
    row runs: what lands meanwhile lands before that row is committed."""
    def wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if sql.lstrip().upper().startswith("UPDATE") and "cancelled" in [
                str(p) for p in params or ()] and job_id in [str(p) for p in params or ()]:
            then()
        return execute(sql, params, many, context)
    return connection.execute_wrapper(wrapper)


def test_a_cancel_in_autocommit_keeps_the_hold_until_its_row_is_committed(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    job_id = _unsent(delayq_settings, 1)
    seen: list[list[str]] = []
    with _during_the_cancels_update(job_id, lambda: (_send_lands(job_id),
                                                     seen.append(_claimable()))):
        assert cancel(job_id) is CancelOutcome.CANCELLED
    assert seen == [[]]  # landed while the row still read scheduled: held back
    assert get_engine().inspect("default", job_id).place == ""
    assert Job.objects.get(pk=job_id).status == JobStatus.CANCELLED


def test_a_cancel_whose_row_became_final_meanwhile_answers_not_found(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    job_id = _unsent(delayq_settings, 1)
    sent: list[str] = []
    signals.job_cancelled.connect(lambda **kw: sent.append(kw["job_id"]), weak=False,
                                  dispatch_uid="test-final-meanwhile")
    try:
        with _during_the_cancels_update(job_id, lambda: Job.objects.filter(pk=job_id).update(
                status=JobStatus.SUCCEEDED)):
            assert cancel(job_id) is CancelOutcome.NOT_FOUND
    finally:
        signals.job_cancelled.disconnect(dispatch_uid="test-final-meanwhile")
    assert Job.objects.get(pk=job_id).status == JobStatus.SUCCEEDED and sent == []


def test_the_cancel_of_a_waiting_job_holds_back_its_release_landing_before_the_commit(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    parent = schedule("tests.jobs.noop", 1, delay=3600)
    child = schedule("tests.jobs.noop", 2, after=parent).id
    assert Job.objects.get(pk=child).status == JobStatus.WAITING
    with transaction.atomic():
        assert cancel(child) is CancelOutcome.CANCELLED
        _send_lands(child)  # its parent's release, committed by a worker meanwhile
        assert child not in _claimable()
    assert get_engine().inspect("default", child).place == ""
    assert Job.objects.get(pk=child).status == JobStatus.CANCELLED


def _ran_and_settled(job_id: str) -> None:
    """A worker ran ``job_id`` and Redis settled it; its audit row has not landed yet."""
    engine = get_engine()
    token = next(j.token for j in engine.claim("default", 50, 30_000).jobs if j.id == job_id)
    assert engine.ack("default", [(job_id, token)], holder="w:test") == [True]


def test_a_cancel_or_replace_of_a_job_that_just_ran_leaves_its_row_to_its_worker(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    ran = schedule("tests.jobs.noop", 1).id
    _ran_and_settled(ran)
    assert cancel(ran) is CancelOutcome.NOT_FOUND
    replaced = schedule("tests.jobs.noop", 2, key="k", on_conflict="replace").id
    _ran_and_settled(replaced)
    new = schedule("tests.jobs.noop", 3, key="k", on_conflict="replace").id
    assert new != replaced
    rows = dict(Job.objects.filter(pk__in=[ran, replaced]).values_list("pk", "status"))
    assert rows == {ran: JobStatus.SCHEDULED, replaced: JobStatus.SCHEDULED}  # not cancelled
    assert get_engine().inspect("default", ran).place == ""


def test_a_run_now_of_a_held_job_writes_the_time_redis_holds_it_until(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    job_id = _unsent(delayq_settings, 1)
    with pytest.raises(RuntimeError), transaction.atomic():
        cancel(job_id)
        raise RuntimeError("rolled back")
    _send_lands(job_id)
    assert run_now(job_id) is MoveOutcome.MOVED
    due = get_engine().inspect("default", job_id).score_ms or 0
    assert abs(Job.objects.get(pk=job_id).run_at.timestamp() * 1000 - due) < 1000
