"""A queue's rate limit counts job starts, as the rows' ``started_at`` show them, also
when every thread of the worker is busy: a worker never claims a rate-limited queue's
jobs ahead of a free thread (no prefetch, no urgent claim past the free threads), so
no job of it waits in the worker on a grant that has grown old.

A job of another queue holds the only thread for a few seconds (longer than a window of
the rate); jobs of the limited queue come due meanwhile. Claimed ahead of the thread,
the grants of two windows would all start within milliseconds when the thread frees."""

from __future__ import annotations

import threading

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.helpers import wait_until
from tests.worker.test_runtime_limits import most_in_window

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

RATE, WINDOW_S = 3, 2.0  # "3/2s" on the queue "slow"
JOBS = 2 * RATE  # two windows' worth
BLOCKER_S = 3.5  # the other queue's job: longer than a window


@pytest.fixture
def limited(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "QUEUE_OPTIONS": {"slow": {"rate_limit": "%d/2s" % RATE}}}
    return delayq_settings


@pytest.mark.parametrize(("prefetch", "priority"), [
    (8, 0),  # the main loop's claims: room for prefetched jobs
    (0, 5),  # the urgent timer's claims: a few jobs past the room
])
def test_no_more_starts_than_the_rate_behind_a_busy_thread(limited, tmp_path, prefetch, priority) -> None:  # type: ignore[no-untyped-def]
    worker = Worker(get_engine(), get_settings(), WorkerOptions(
        queues=("default", "slow"), concurrency=1, prefetch=prefetch))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        blocker = schedule("tests.jobs.sleep_then_record", str(tmp_path / "b.txt"), "b",
                           BLOCKER_S)
        wait_until(lambda: blocker.status == JobStatus.RUNNING, timeout=60)
        ids = [schedule("tests.jobs.noop", i, queue="slow", priority=priority).id
               for i in range(JOBS)]
        wait_until(lambda: Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED)
                   .count() == JOBS, timeout=90, step=0.05)
    finally:
        worker.request_stop()
        thread.join(30)
    rows = list(Job.objects.filter(pk__in=ids))
    assert all(row.attempts == 1 for row in rows)  # none handed back, none charged twice
    starts = [row.started_at.timestamp() for row in rows if row.started_at is not None]
    assert len(starts) == JOBS
    ended = Job.objects.get(pk=blocker.id).finished_at
    assert ended is not None and min(starts) >= ended.timestamp() - 0.05  # waited for it
    # RATE + 1 starts inside a window well short of the rate's: only the defect does that
    assert most_in_window(starts, WINDOW_S * 0.75) <= RATE, sorted(starts)


def test_a_rated_queue_is_claimed_for_free_threads_only_and_never_spun_on(limited) -> None:  # type: ignore[no-untyped-def]
    """Threads not started: one default job claimed takes the only thread. The rated queue
    has no room (the prefetch is not its), the urgent timer claims none of it, and its due
    jobs do not cut the main loop's wait short (no spin: a thread that frees wakes it)."""
    worker = Worker(get_engine(), get_settings(), WorkerOptions(
        queues=("default", "slow"), concurrency=1, prefetch=4))
    claiming = worker.claiming
    schedule("tests.jobs.noop")
    for i in range(3):
        schedule("tests.jobs.noop", i, queue="slow", priority=5)
    claiming.claim("default")
    assert worker.claimed_total == 1
    assert (claiming.capacity("default"), claiming.capacity("slow")) == (4, 0)
    claiming.claim("slow")
    claiming.claim_urgent("slow")
    assert worker.claimed_total == 1  # none of the rated queue's jobs claimed
    claiming.next_due = {"default": None, "slow": int(claiming.clock.now_ms()) - 1}
    assert claiming.wait_ms(1000) == 1000
    worker.claiming.release_unstarted()
