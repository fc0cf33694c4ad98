"""The schedule() path: the jobs of one transaction reach Redis in one enqueue per queue
after commit, never before it, never after a rollback of their transaction or savepoint
(whichever call of the transaction was the last); a row is stored as ``save()`` stores
it; a failed send leaves the rows for the reconciler (the outbox)."""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from django_delayq import cancel, schedule
from django_delayq.core.api import JobSpec, schedule_many
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine.engine import Engine
from django_delayq.models import Job, JobStatus

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    pass


def _place(job_id: str, queue: str = "default") -> str:
    return get_engine().inspect(queue, job_id).place


@pytest.fixture
def enqueues(delayq_settings, monkeypatch) -> list[tuple[str, int]]:  # type: ignore[no-untyped-def]
    """Every ``Engine.enqueue`` call (queue, jobs), passed on to the real Redis."""
    calls: list[tuple[str, int]] = []
    real = Engine.enqueue

    def recording(self: Engine, queue: str, jobs: Any, now_ms: int | None = None) -> int:
        jobs = list(jobs)
        calls.append((queue, len(jobs)))
        return real(self, queue, jobs, now_ms)

    monkeypatch.setattr(Engine, "enqueue", recording)
    return calls


def test_one_transaction_sends_its_jobs_in_one_enqueue_per_queue_after_commit(
        enqueues) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        mails = [schedule("tests.jobs.noop", i, queue="emails", delay=60) for i in range(3)]
        first = [schedule("tests.jobs.noop", i, delay=60) for i in range(40)]
        mails += [schedule("tests.jobs.noop", i, queue="emails") for i in range(2)]
        assert enqueues == [] and _place(first[0].id) == ""  # nothing before commit
    assert sorted(enqueues) == [("default", 40), ("emails", 5)]
    assert {_place(h.id) for h in first} == {"pending"}
    assert {_place(h.id, "emails") for h in mails} <= {"pending", "ready"}


def test_autocommit_sends_each_job_at_once(enqueues) -> None:  # type: ignore[no-untyped-def]
    handles = [schedule("tests.jobs.noop", i, delay=60) for i in range(3)]
    assert enqueues == [("default", 1)] * 3
    assert {_place(h.id) for h in handles} == {"pending"}


def test_rollback_of_a_savepoint_sends_only_the_jobs_whose_rows_stay(
        enqueues) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        kept = [schedule("tests.jobs.noop", 1, delay=60)]
        with pytest.raises(Rollback), transaction.atomic():
            lost = schedule("tests.jobs.noop", 2, delay=60)
            raise Rollback
        kept.append(schedule("tests.jobs.noop", 3, delay=60))
        with transaction.atomic():  # a savepoint that commits: its job is sent too
            kept.append(schedule("tests.jobs.noop", 4, delay=60))
    assert set(Job.objects.values_list("id", flat=True)) == {h.id for h in kept}
    assert {_place(h.id) for h in kept} == {"pending"} and _place(lost.id) == ""
    assert sum(n for _, n in enqueues) == 3


def test_the_last_call_in_a_rolled_back_savepoint_leaves_the_others_sent_in_one_enqueue(
        enqueues) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        kept = [schedule("tests.jobs.noop", i, delay=60) for i in range(4)]
        with pytest.raises(Rollback), transaction.atomic():
            lost = [schedule("tests.jobs.noop", i, delay=60) for i in range(3)]
            raise Rollback
    assert enqueues == [("default", 4)]
    assert {_place(h.id) for h in kept} == {"pending"}
    assert {_place(h.id) for h in lost} == {""}


def test_nested_savepoints_send_what_stays_and_nothing_of_a_rolled_back_inner_one(
        enqueues) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        with transaction.atomic():
            kept = [schedule("tests.jobs.noop", 1, delay=60)]
            with transaction.atomic():
                kept.append(schedule("tests.jobs.noop", 2, queue="emails", delay=60))
                with pytest.raises(Rollback), transaction.atomic():
                    lost = schedule("tests.jobs.noop", 3, delay=60)
                    raise Rollback
        with pytest.raises(Rollback), transaction.atomic():
            with transaction.atomic():
                lost_too = schedule("tests.jobs.noop", 4, delay=60)
            raise Rollback
        assert enqueues == []
    assert sorted(enqueues) == [("default", 1), ("emails", 1)]
    assert _place(kept[0].id) == "pending" and _place(kept[1].id, "emails") == "pending"
    assert _place(lost.id) == "" and _place(lost_too.id) == ""


def test_a_durable_block_sends_at_its_commit(enqueues) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic(durable=True):
        handles = [schedule("tests.jobs.noop", i, delay=60) for i in range(3)]
        assert enqueues == []
    assert enqueues == [("default", 3)]
    assert {_place(h.id) for h in handles} == {"pending"}


def test_schedule_many_and_schedule_in_one_transaction_share_one_enqueue(
        enqueues) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        one = schedule("tests.jobs.noop", 0, delay=60)
        many = schedule_many("tests.jobs.noop", [JobSpec(args=[i], delay=60) for i in range(5)])
        with pytest.raises(Rollback), transaction.atomic():
            lost = schedule_many("tests.jobs.noop", [JobSpec(args=[9], delay=60)])
            raise Rollback
    assert enqueues == [("default", 6)]
    assert {_place(i) for i in [one.id, *many]} == {"pending"} and _place(lost[0]) == ""


def test_a_job_scheduled_and_cancelled_in_one_transaction_is_not_left_in_redis(
        enqueues) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        gone = schedule("tests.jobs.noop", 1, delay=60)
        cancel(gone.id)
        later = schedule("tests.jobs.noop", 2, delay=60)  # its send comes after the cancel
    assert _place(gone.id) == "" and _place(later.id) == "pending"
    assert Job.objects.get(pk=gone.id).status == JobStatus.CANCELLED


def test_a_job_replaced_in_its_own_transaction_is_not_left_in_redis(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        old = schedule("tests.jobs.noop", 1, key="k", on_conflict="replace", delay=60)
        new = schedule("tests.jobs.noop", 2, key="k", on_conflict="replace", delay=60)
    assert _place(old.id) == "" and _place(new.id) == "pending"
    assert Job.objects.get(pk=old.id).status == JobStatus.CANCELLED


def test_a_transaction_of_another_thread_sends_only_its_own_jobs(
        enqueues) -> None:  # type: ignore[no-untyped-def]
    import threading

    from django.db import connections

    other: list[Any] = []
    with transaction.atomic():
        mine = schedule("tests.jobs.noop", 1, delay=60)

        def elsewhere() -> None:  # its own connection: commits while ours is open
            try:
                with transaction.atomic():
                    other.append(schedule("tests.jobs.noop", 2, queue="emails", delay=60))
            finally:
                connections.close_all()

        if connections["default"].vendor != "sqlite":  # one writer at a time there
            thread = threading.Thread(target=elsewhere)
            thread.start()
            thread.join(60)
            assert _place(other[0].id, "emails") == "pending" and _place(mine.id) == ""
    assert _place(mine.id) == "pending"


def test_rolled_back_transaction_sends_nothing_and_the_next_one_its_own(
        enqueues) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Rollback), transaction.atomic():
        gone = [schedule("tests.jobs.noop", i, delay=60) for i in range(5)]
        raise Rollback
    with transaction.atomic():
        kept = schedule("tests.jobs.noop", 9, delay=60)
    assert enqueues == [("default", 1)]
    assert [_place(h.id) for h in gone] == [""] * 5 and _place(kept.id) == "pending"
    assert list(Job.objects.values_list("id", flat=True)) == [kept.id]


def test_row_holds_what_was_scheduled(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    before = timezone.now()
    handle = schedule("tests.jobs.noop", 2, 3, delay=timedelta(minutes=5), priority=7,
                      timeout=30, extra={"nested": [1, "two", None]})
    row = Job.objects.get(pk=handle.id)
    assert (row.callable_path, row.queue, row.status) == ("tests.jobs.noop", "default",
                                                          JobStatus.SCHEDULED)
    assert row.args == [2, 3] and row.kwargs == {"extra": {"nested": [1, "two", None]}}
    assert row.priority == 7 and row.timeout == 30 and row.attempts == 0
    assert timedelta(minutes=5) <= row.run_at - before < timedelta(minutes=5, seconds=30)
    assert row.created_at >= before and row.run_at == row.scheduled_for


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_jobs_whose_send_failed_are_enqueued_by_the_reconciler(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    reachable = delayq_settings.DELAYQ["REDIS_URL"]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "REDIS_URL": "redis://127.0.0.1:%d/0" % _closed_port()}
    with transaction.atomic():  # Redis is down at commit: the rows stay, scheduled
        handles = [schedule("tests.jobs.noop", i, delay=60) for i in range(4)]
    assert Job.objects.filter(status=JobStatus.SCHEDULED).count() == 4
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "REDIS_URL": reachable}
    assert {_place(h.id) for h in handles} == {""}
    Reconciler(get_engine(), get_settings(), ("default",)).run_all(assume_lost=True)
    assert {_place(h.id) for h in handles} == {"pending"}
