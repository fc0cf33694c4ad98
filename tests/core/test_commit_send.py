"""The send of committed jobs (``commit_batch.send``): done before the caller goes on, so a
job is in Redis when ``schedule()`` returns in autocommit (and when its transaction's
``atomic`` block exits); a failed send never fails the caller and leaves its rows for the
reconciler; a process that exits right after scheduling has sent its jobs."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap

import pytest
from django.db import transaction
from django.utils import timezone

from django_delayq import cancel, reschedule, run_now, schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine import CancelOutcome
from django_delayq.engine.engine import MoveOutcome
from django_delayq.models import Job, JobStatus
from tests.helpers import RolledBack, score_ms
from tests.worker.conftest import ROOT, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def _places(handles: list[object], queue: str = "default") -> set[str]:
    return {get_engine().inspect(queue, h.id).place for h in handles}  # type: ignore[attr-defined]


def test_a_job_is_in_redis_when_schedule_returns_and_when_its_block_exits(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    assert _places([schedule("tests.jobs.noop", 1, delay=60)]) == {"pending"}
    with transaction.atomic():
        in_tx = [schedule("tests.jobs.noop", i, queue="emails", delay=60) for i in range(30)]
    assert _places(in_tx, "emails") == {"pending"}


def test_a_failed_send_never_fails_the_caller_and_leaves_the_rows_for_the_reconciler(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    reachable = delayq_settings.DELAYQ["REDIS_URL"]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    handles = [schedule("tests.jobs.noop", i, delay=60) for i in range(3)]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "REDIS_URL": reachable}
    assert Job.objects.filter(status=JobStatus.SCHEDULED).count() == 3
    assert _places(handles) == {""}
    Reconciler(get_engine(), get_settings(), ("default",)).run_all(assume_lost=True)
    assert _places(handles) == {"pending"}


def test_a_process_that_exits_right_after_schedule_has_sent_its_jobs(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    code = textwrap.dedent("""
        import django
        django.setup()
        from django.db import transaction
        from django_delayq import schedule
        ids = [schedule("tests.jobs.noop", i, delay=60).id for i in range(100)]
        with transaction.atomic():
            ids += [schedule("tests.jobs.noop", i, delay=60).id for i in range(100)]
        print(" ".join(ids))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=worker_env(delayq_settings))
    assert out.returncode == 0, out.stderr
    ids = out.stdout.split()
    assert len(ids) == 200
    assert {get_engine().inspect("default", i).place for i in ids} == {"pending"}


def test_cancel_and_reschedule_right_after_schedule_see_the_job_in_redis(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    gone, moved = (schedule("tests.jobs.noop", i, delay=3600) for i in range(2))
    assert cancel(gone.id) is CancelOutcome.CANCELLED
    assert run_now(moved.id) is MoveOutcome.MOVED
    assert _places([gone]) == {""} and _places([moved]) <= {"pending", "ready"}
    assert Job.objects.get(pk=gone.id).status == JobStatus.CANCELLED


def test_a_cancel_in_the_scheduling_transaction_leaves_nothing_in_redis(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        handle = schedule("tests.jobs.noop", 1, delay=3600)
        cancel(handle.id)
    assert _places([handle]) == {""}  # sent at the commit, then cancelled after its send
    assert Job.objects.get(pk=handle.id).status == JobStatus.CANCELLED


def _run_at_in(job_id: str, seconds: float) -> bool:
    """Whether the row is due ``seconds`` from now (within the test's own slowness)."""
    left = (Job.objects.get(pk=job_id).run_at - timezone.now()).total_seconds()
    return seconds - 30 <= left <= seconds


def _claimable() -> list[str]:
    return [j.id for j in get_engine().claim("default", 50, 30_000).jobs]


def test_reschedule_and_run_now_in_the_scheduling_transaction_move_its_send(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """The job is not in Redis yet: its send at the commit carries the new due time, and
    the row says the same."""
    at = timezone.now().replace(microsecond=0) + dt.timedelta(hours=2)
    with transaction.atomic():
        later, now, fixed, kept = (schedule("tests.jobs.noop", i, delay=3600) for i in range(4))
        assert reschedule(later.id, delay=120) is MoveOutcome.MOVED
        assert run_now(now.id) is MoveOutcome.MOVED
        assert reschedule(fixed.id, at=at) is MoveOutcome.MOVED
        before = get_engine().time_ms()
    after = get_engine().time_ms()
    assert before + 120_000 <= score_ms(later.id) <= after + 120_000
    assert _run_at_in(later.id, 120) and _run_at_in(now.id, 0) and _run_at_in(kept.id, 3600)
    assert score_ms(fixed.id) == int(at.timestamp() * 1000)
    assert Job.objects.get(pk=fixed.id).run_at == at
    assert before + 3_600_000 <= score_ms(kept.id) <= after + 3_600_000
    assert _claimable() == [now.id]  # due now: a worker runs it; the others wait


def test_a_move_rolled_back_with_its_savepoint_leaves_the_earlier_one(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        handle = schedule("tests.jobs.noop", 1, delay=3600)
        assert reschedule(handle.id, delay=120) is MoveOutcome.MOVED
        with pytest.raises(RolledBack), transaction.atomic():
            assert run_now(handle.id) is MoveOutcome.MOVED
            raise RolledBack
        before = get_engine().time_ms()
    assert before + 120_000 <= score_ms(handle.id) <= get_engine().time_ms() + 120_000
    assert _run_at_in(handle.id, 120) and _claimable() == []


def test_a_move_after_a_cancel_in_the_same_transaction_reaches_the_send(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """The cancel's call after the commit sends the jobs registered before it first: the
    move registered after it still applies to that send."""
    with transaction.atomic():
        handle, gone = (schedule("tests.jobs.noop", i, delay=3600) for i in range(2))
        assert cancel(gone.id) is CancelOutcome.CANCELLED
        assert run_now(handle.id) is MoveOutcome.MOVED
    assert _places([gone]) == {""} and _claimable() == [handle.id]


def test_a_rolled_back_transaction_leaves_no_job_and_no_move(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RolledBack), transaction.atomic():
        handle = schedule("tests.jobs.noop", 1, delay=3600)
        assert run_now(handle.id) is MoveOutcome.MOVED
        raise RolledBack
    assert not Job.objects.filter(pk=handle.id).exists() and _places([handle]) == {""}
    again = schedule("tests.jobs.noop", 2, delay=3600)  # the next send: nothing moved
    assert _run_at_in(again.id, 3600) and _claimable() == []
