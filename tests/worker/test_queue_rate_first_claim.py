"""A queue's rate limit is in force from a worker's first claim, the urgent timer's
included: jobs waiting when the first worker starts do not get a free first window.

At start-up the wake listener announces every queue as due, which wakes the urgent
timer; its small claim may come before the main loop's first claim of the queue, which
used to be the only one that wrote the queue's limit into Redis first. The claims are
measured on the Redis clock, by the queue's own window log (claim.lua's starts ZSET, read
while the jobs run: an entry stays at least one window)."""

from __future__ import annotations

import threading

import pytest
import redis

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus
from django_delayq.worker.claiming import URGENT_BATCH
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.helpers import wait_until
from tests.worker.test_runtime_limits import most_in_window

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

RATE = 10  # claims per second of the queue "slow"
JOBS = 30


@pytest.fixture
def limited(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "QUEUE_OPTIONS": {"slow": {"rate_limit": "%d/s" % RATE}}}
    return delayq_settings


def waiting_jobs(tmp_path) -> list[str]:  # type: ignore[no-untyped-def]
    out = str(tmp_path / "starts.txt")
    return [schedule("tests.jobs_more.stamp", out, "j%d" % i, queue="slow").id
            for i in range(JOBS)]


def window_log(redis_url: str) -> tuple[redis.Redis, str]:
    return redis.Redis.from_url(redis_url), get_engine().keys("slow").starts


def test_the_urgent_timers_claim_before_the_main_loops_first_one_is_limited(limited, tmp_path) -> None:  # type: ignore[no-untyped-def]
    waiting_jobs(tmp_path)
    worker = Worker(get_engine(), get_settings(),
                    WorkerOptions(queues=("slow",), prefetch=100))  # room for the window
    client, starts = window_log(limited.DELAYQ["REDIS_URL"])
    worker.claiming.claim_urgent("slow")  # what the start-up wake-up makes the urgent timer do
    limit = get_engine().queue_limit("slow")
    assert limit is not None and limit.rate == (RATE, 1000)  # written before that claim
    assert client.zcard(starts) == URGENT_BATCH  # and the claim counted in the window
    worker.claiming.claim("slow")  # the main loop's first claim: the rest of the window only
    assert client.zcard(starts) == RATE
    assert worker.claimed_total == RATE


@pytest.mark.parametrize("run", range(3))  # the race at start-up went either way
def test_jobs_waiting_before_the_first_worker_starts_get_no_more_than_the_rate(limited, tmp_path, run) -> None:  # type: ignore[no-untyped-def]
    ids = waiting_jobs(tmp_path)
    client, starts = window_log(limited.DELAYQ["REDIS_URL"])
    worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("slow",),
                                                                concurrency=4))
    thread = threading.Thread(target=worker.run, daemon=True)
    seen: dict[bytes, float] = {}  # window log entry "<id>:<token>:<ms>" -> claim ms

    def all_done() -> bool:
        seen.update(client.zrange(starts, 0, -1, withscores=True))
        return Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == JOBS

    thread.start()
    try:
        wait_until(all_done, timeout=60, step=0.05)
    finally:
        worker.request_stop()
        thread.join(30)
    assert len(seen) == JOBS  # every claim was logged, none unseen
    claims_s = [ms / 1000 for ms in seen.values()]
    assert most_in_window(claims_s, 1.0) <= RATE
    assert max(claims_s) - min(claims_s) >= JOBS / RATE - 1  # three windows, not fewer
