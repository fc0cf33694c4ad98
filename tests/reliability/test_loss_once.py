"""A loss is recovered once: however many reconcilers notice that Redis lost a queue's
data, each live row is re-enqueued once, under a lease token no earlier delivery had.

The race it closes: two reconcilers in a loss pass both find a job missing; one puts it
back, a worker runs and acks it (gone from Redis, its audit row not written yet); the
other then put it back too, and the job ran twice, both runs attempt 1."""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest

from django_delayq import schedule, schedule_many
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.options import JobSpec
from django_delayq.core.reconcile import RECENT_SECONDS, Reconciler
from django_delayq.core.reconcile_state import Cursor
from django_delayq.models import Job, JobStatus
from tests.helpers import point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

KEEP_MS = RECENT_SECONDS * 1000


def _wipe(prefix: str) -> None:
    """As a restart without persistence does to this test's keys."""
    client = get_engine().client
    for key in list(client.scan_iter(match="{%s*" % prefix, count=1000)):
        client.delete(key)


def _backdate(seconds: float = 3600) -> None:
    for row in Job.objects.all():
        Job.objects.filter(pk=row.pk).update(updated_at=row.updated_at - timedelta(seconds=seconds))


def _run_and_ack(queue: str, holder: str) -> list[tuple[str, int]]:
    """What a worker does to every due job: claim it, run it, ack it (its audit row is
    not written: the flush is on its way)."""
    engine = get_engine()
    done: list[tuple[str, int]] = []
    while True:
        claimed = engine.claim(queue, 100, lease_ms=60_000).jobs
        if not claimed:
            return done
        leases = [(job.id, job.token) for job in claimed]
        assert all(engine.ack(queue, leases, holder=holder))
        done += leases


@pytest.mark.parametrize("holder", ["worker-1", ""])  # with a settled record, and without
def test_two_loss_passes_put_each_job_back_once(settings, redis_server, holder: str) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, RECONCILE_GRACE_SECONDS=3600)
    handles = schedule_many("tests.jobs.noop", [JobSpec() for _ in range(150)])
    _backdate()
    first, second = (Reconciler(get_engine(), get_settings(), ("default",)) for _ in range(2))
    assert first.check_epochs() == second.check_epochs() == []  # first looks: epochs kept
    _wipe(settings.DELAYQ["PREFIX"])
    assert first.check_epochs() == second.check_epochs() == ["default"]  # both see the loss
    rows = list(Job.objects.all())
    stale = second._find(rows)  # the second one looks first: every job is missing
    assert len(stale) == len(handles)
    assert first._batch(Cursor(("default",), 0.0, lost=True)) == len(handles)
    ran = _run_and_ack("default", holder)
    assert len(ran) == len(handles)
    assert second._act(stale, None, lost=True) == 0  # the jobs ran: none put back again
    assert _run_and_ack("default", holder) == []


def test_a_delivery_the_lost_data_held_is_never_given_its_token_again(  # type: ignore[no-untyped-def]
        settings, redis_server) -> None:
    point_at(settings, redis_server, RECONCILE_GRACE_SECONDS=3600)
    h = schedule("tests.jobs.noop")
    engine = get_engine()
    [before] = engine.claim("default", 1, lease_ms=60_000).jobs  # its row never said so
    assert before.token == 1
    _backdate()
    reconciler = Reconciler(engine, get_settings(), ("default",))
    reconciler.check_epochs()
    _wipe(settings.DELAYQ["PREFIX"])
    assert reconciler.check_epochs() == ["default"]
    assert reconciler._batch(Cursor(("default",), 0.0, lost=True)) == 1
    [after] = engine.claim("default", 1, lease_ms=60_000).jobs
    assert after.id == h.id and after.token > before.token
    assert not engine.ack("default", [(before.id, before.token)])[0]  # the old lease: refused


def test_reenqueue_is_once_per_job_and_never_lowers_a_counter(settings, redis_server) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    engine = get_engine()
    assert engine.reenqueue("default", [("a", 0), ("b", 0)], {"a": 4}, keep_ms=KEEP_MS,
                            keep_max=1000) == 2
    assert engine.reenqueue("default", [("a", 0), ("b", 0)], {}, keep_ms=KEEP_MS,
                            keep_max=1000) == 0  # queued
    jobs = {job.id: job for job in engine.claim("default", 10, 60_000).jobs}
    # attempt 5 next (seed 4); its token from the Redis clock, above any count of deliveries
    assert {i: j.attempt for i, j in jobs.items()} == {"a": 5, "b": 1}
    assert jobs["a"].token > 10**12 and jobs["b"].token == 1
    claimed = {i: j.token for i, j in jobs.items()}
    assert engine.ack("default", list(claimed.items())) == [True, True]
    assert engine.reenqueue("default", [("a", 0), ("b", 0)], {"a": 1}, keep_ms=KEEP_MS,
                            keep_max=1000) == 0  # re-enqueued moments ago: ran since
    time.sleep(0.01)  # the server clock past the ms of the re-enqueue above
    assert engine.reenqueue("default", [("a", 0)], {"a": 2}, keep_ms=1, keep_max=1000) == 1
    (again,) = engine.claim("default", 10, 60_000).jobs
    assert again.attempt == 3 and again.token > claimed["a"]  # a token never handed out


@pytest.mark.worker
def test_workers_that_all_notice_a_loss_run_no_unstarted_job_twice(  # type: ignore[no-untyped-def]
        settings, volatile_server, start_worker, tmp_path: Path) -> None:
    point_at(settings, volatile_server, RECONCILE_GRACE_SECONDS=3600)
    out = tmp_path / "runs.txt"
    total = 3000
    schedule_many("tests.jobs.record", [JobSpec(args=(str(out), "j%d" % i))
                                        for i in range(total)])
    procs = [start_worker("--queues", "default", "--concurrency", "4") for _ in range(3)]
    try:
        wait_until(lambda: out.exists() and len(out.read_text().splitlines()) > total // 10,
                   timeout=60)
        volatile_server.restart()  # every key gone: each worker's reconciler sees the loss
        started = {line.split()[0] for line in out.read_text().splitlines()}
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == total,
                   timeout=180)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(60) == 0
    runs: dict[str, list[str]] = {}
    for tag, _id, attempt, _pid in (line.split() for line in out.read_text().splitlines()):
        runs.setdefault(tag, []).append(attempt)
    assert len(runs) == total and len(started) < total
    twice = {tag: attempts for tag, attempts in runs.items()
             if len(attempts) > 1 and tag not in started}
    assert not twice, (len(twice), list(twice.items())[:5])
    reused = {tag: attempts for tag, attempts in runs.items()
              if len(set(attempts)) < len(attempts)}
    assert not reused, (len(reused), list(reused.items())[:5])


def test_an_ordinary_reenqueue_after_a_loss_leaves_the_jobs_to_the_loss_pass(  # type: ignore[no-untyped-def]
        settings, redis_server) -> None:
    """A reconciler that last saw epoch E does not put jobs back into a Redis whose epoch
    is gone (wiped since): the loss pass, which counts the attempts a lost delivery may
    have had, does; nor does it create an epoch that would hide the loss."""
    point_at(settings, redis_server)
    engine = get_engine()
    k = engine.keys("default")
    engine.client.set(k.epoch, "1:seen:e")
    assert engine.reenqueue("default", [("a", 0)], {}, keep_ms=KEEP_MS, keep_max=1000,
                            epochs={"default": "1:seen:e"}) == 1
    engine.client.flushdb()  # the wipe
    assert engine.reenqueue("default", [("b", 0)], {}, keep_ms=KEEP_MS, keep_max=1000,
                            epochs={"default": "1:seen:e"}) == 0
    assert engine.inspect("default", "b").place == "" and not engine.client.exists(k.epoch)
    assert engine.reenqueue("default", [("b", 0)], {"b": 1}, keep_ms=KEEP_MS,
                            keep_max=1000) == 1  # the loss pass
