"""``reschedule()`` and ``run_now()`` of a committed job inside a transaction: the Redis
move (and the row's new due time) follow the transaction, as the row does. Made at its
commit; nothing when it rolls back (or when the savepoint of the call does). A job a
worker claimed between the call and the commit is not moved, and its row keeps its due
time. Real redis-server and database."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone

from django_delayq import reschedule, run_now, schedule
from django_delayq.core.connection import get_engine
from django_delayq.engine.engine import MoveOutcome
from django_delayq.models import Job
from tests.helpers import RolledBack, score_ms

pytestmark = pytest.mark.django_db(transaction=True)


def _due_in(job_id: str, seconds: float, before_ms: int) -> bool:
    """Whether Redis has the job due ``seconds`` after ``before_ms`` (within the test's
    own slowness) and its row says the same."""
    score = score_ms(job_id)
    left = (Job.objects.get(pk=job_id).run_at - timezone.now()).total_seconds()
    return (before_ms + seconds * 1000 <= score <= get_engine().time_ms() + seconds * 1000
            and seconds - 30 <= left <= seconds)


def _claimable() -> list[str]:
    return [j.id for j in get_engine().claim("default", 50, 30_000).jobs]


def _committed() -> tuple[str, int]:
    before = get_engine().time_ms()
    return schedule("tests.jobs.noop", 1, delay=3600).id, before


@pytest.mark.parametrize("move", ["reschedule", "run_now"])
def test_a_move_in_a_transaction_that_rolls_back_leaves_redis_and_row_as_they_were(
        delayq_settings, move: str) -> None:  # type: ignore[no-untyped-def]
    job_id, before = _committed()
    with pytest.raises(RolledBack), transaction.atomic():
        outcome = reschedule(job_id, delay=120) if move == "reschedule" else run_now(job_id)
        assert outcome is MoveOutcome.MOVED
        raise RolledBack
    assert _due_in(job_id, 3600, before) and _claimable() == []


@pytest.mark.parametrize("move", ["reschedule", "run_now"])
def test_a_move_in_a_transaction_is_made_at_its_commit(
        delayq_settings, move: str) -> None:  # type: ignore[no-untyped-def]
    job_id, before = _committed()
    with transaction.atomic():
        outcome = reschedule(job_id, delay=120) if move == "reschedule" else run_now(job_id)
        assert outcome is MoveOutcome.MOVED
        assert _due_in(job_id, 3600, before)  # not before the commit
        at_call = get_engine().time_ms()
    if move == "reschedule":
        assert _due_in(job_id, 120, at_call) and _claimable() == []
    else:
        assert _due_in(job_id, 0, at_call) and _claimable() == [job_id]


def test_a_move_rolled_back_with_its_savepoint_leaves_the_earlier_one(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    job_id, _ = _committed()
    with transaction.atomic():
        before = get_engine().time_ms()
        assert reschedule(job_id, delay=120) is MoveOutcome.MOVED
        with pytest.raises(RolledBack), transaction.atomic():
            assert run_now(job_id) is MoveOutcome.MOVED
            raise RolledBack
    assert _due_in(job_id, 120, before) and _claimable() == []


def test_a_job_claimed_before_the_commit_is_not_moved_and_its_row_keeps_its_due_time(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    job_id = schedule("tests.jobs.noop", 1).id  # due now
    run_at = Job.objects.get(pk=job_id).run_at
    with transaction.atomic():
        assert reschedule(job_id, delay=120) is MoveOutcome.MOVED
        assert _claimable() == [job_id]  # a worker claims it before the commit
    assert get_engine().inspect("default", job_id).place == "inflight"
    assert Job.objects.get(pk=job_id).run_at == run_at


def test_a_job_running_when_called_answers_already_running_in_a_transaction(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    job_id, _ = _committed()
    assert run_now(job_id) is MoveOutcome.MOVED and _claimable() == [job_id]
    run_at = Job.objects.get(pk=job_id).run_at
    with transaction.atomic():
        assert reschedule(job_id, delay=120) is MoveOutcome.ALREADY_RUNNING
    assert get_engine().inspect("default", job_id).place == "inflight"
    assert Job.objects.get(pk=job_id).run_at == run_at


def test_several_moves_in_a_transaction_are_made_in_order_the_last_stands(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    job_id, _ = _committed()
    at = timezone.now().replace(microsecond=0) + dt.timedelta(hours=2)
    with transaction.atomic():
        assert run_now(job_id) is MoveOutcome.MOVED
        assert reschedule(job_id, at=at) is MoveOutcome.MOVED
    assert score_ms(job_id) == int(at.timestamp() * 1000)
    assert Job.objects.get(pk=job_id).run_at == at and _claimable() == []
