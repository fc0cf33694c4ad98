"""The background sender (``core/sender.py``): a job whose row committed reaches Redis,
or the reconciler brings it there; ``flush()`` waits for every job given before it; the
process's exit sends what is left; inline sending stays the default."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import redis
from django.db import transaction

from django_delayq import schedule
from django_delayq.core import sender
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job, JobStatus
from tests.worker.conftest import ROOT, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def background(delayq_settings) -> Iterator[None]:  # type: ignore[no-untyped-def]
    sender.use_background(True)
    yield
    sender.use_background(False)


def _places(handles: list[object], queue: str = "default") -> set[str]:
    return {get_engine().inspect(queue, h.id).place for h in handles}  # type: ignore[attr-defined]


def test_inline_is_the_default_a_job_is_in_redis_when_schedule_returns(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    assert _places([schedule("tests.jobs.noop", 1, delay=60)]) == {"pending"}
    assert sender.unsent() == 0


def test_background_jobs_of_autocommit_and_of_a_transaction_reach_redis_by_flush(
        background) -> None:  # type: ignore[no-untyped-def]
    auto = [schedule("tests.jobs.noop", i, delay=60) for i in range(50)]
    with transaction.atomic():
        in_tx = [schedule("tests.jobs.noop", i, queue="emails", delay=60) for i in range(30)]
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        lost = schedule("tests.jobs.noop", 9, delay=60)
        1 / 0  # noqa: B018 - roll back
    assert sender.flush(timeout=60)
    assert sender.unsent() == 0
    assert _places(auto) == {"pending"} and _places(in_tx, "emails") == {"pending"}
    assert _places([lost]) == {""}


def test_flush_waits_for_a_send_held_up_by_redis(
        background, redis_server) -> None:  # type: ignore[no-untyped-def]
    admin = redis.Redis.from_url(redis_server.url)
    admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")  # the enqueue script waits
    try:
        handle = schedule("tests.jobs.noop", 1, delay=60)
        assert sender.flush(timeout=0.05) is False and sender.unsent() == 1
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    assert sender.flush(timeout=60)
    assert _places([handle]) == {"pending"}


def test_a_failed_send_leaves_the_rows_for_the_reconciler(
        background, delayq_settings) -> None:  # type: ignore[no-untyped-def]
    reachable = delayq_settings.DELAYQ["REDIS_URL"]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    handles = [schedule("tests.jobs.noop", i, delay=60) for i in range(3)]
    assert sender.flush(timeout=60) and sender.unsent() == 0
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
        from django_delayq import schedule
        from django_delayq.core import sender
        sender.use_background(True)
        print(" ".join(schedule("tests.jobs.noop", i, delay=60).id for i in range(200)))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=worker_env(delayq_settings))
    assert out.returncode == 0, out.stderr
    ids = out.stdout.split()
    assert len(ids) == 200
    assert {get_engine().inspect("default", i).place for i in ids} == {"pending"}


def test_cancel_and_reschedule_right_after_schedule_see_the_job_in_redis(
        background) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import cancel, run_now
    from django_delayq.engine import CancelOutcome
    from django_delayq.engine.engine import MoveOutcome

    gone, moved = (schedule("tests.jobs.noop", i, delay=3600) for i in range(2))
    assert cancel(gone.id) is CancelOutcome.CANCELLED
    assert run_now(moved.id) is MoveOutcome.MOVED
    assert sender.flush(timeout=60)
    assert _places([gone]) == {""} and _places([moved]) <= {"pending", "ready"}
    assert Job.objects.get(pk=gone.id).status == JobStatus.CANCELLED


def test_a_cancel_in_the_scheduling_transaction_leaves_nothing_in_redis(
        background) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import cancel

    with transaction.atomic():
        handle = schedule("tests.jobs.noop", 1, delay=3600)
        cancel(handle.id)
    assert sender.flush(timeout=60)
    assert _places([handle]) == {""}  # sent at the commit, then cancelled after its send
    assert Job.objects.get(pk=handle.id).status == JobStatus.CANCELLED
