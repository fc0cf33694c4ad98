"""The send of committed jobs (``commit_batch.send``): done before the caller goes on, so a
job is in Redis when ``schedule()`` returns in autocommit (and when its transaction's
``atomic`` block exits); a failed send never fails the caller and leaves its rows for the
reconciler; a process that exits right after scheduling has sent its jobs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from django.db import transaction

from django_delayq import cancel, run_now, schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine import CancelOutcome
from django_delayq.engine.engine import MoveOutcome
from django_delayq.models import Job, JobStatus
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
