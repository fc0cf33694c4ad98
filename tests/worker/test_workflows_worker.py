"""Workflows with real worker processes: a 10,000-job fan-in runs its callback exactly
once, and a worker SIGKILLed while it releases children loses and doubles none of them
(the release invariant, docs/internals.md)."""

from __future__ import annotations

import signal
import time

import pytest

from django_delayq import job
from django_delayq.core.api import chain, group
from django_delayq.models import Job, JobDependency, JobStatus
from tests.helpers import wait_until
from tests.worker.conftest import worker_starter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def tags(path) -> list[str]:  # type: ignore[no-untyped-def]
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def deliveries(path, tag: str) -> list[int]:  # type: ignore[no-untyped-def]
    """The attempt numbers of the runs ``jobs.record`` wrote for ``tag``."""
    return [int(line.split()[2]) for line in path.read_text().splitlines()
            if line.split()[0] == tag]


def released_once(path, tag: str) -> bool:  # type: ignore[no-untyped-def]
    """Ran, and no attempt number twice. A job in flight when its worker is killed runs
    again as its next attempt (at least once); a second release would enqueue it afresh
    after its ack forgot its counter, so a second run would carry attempt 1 again."""
    attempts = deliveries(path, tag)
    return bool(attempts) and len(set(attempts)) == len(attempts)


def succeeded(*ids: str) -> int:
    return Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count()


@pytest.mark.slow
def test_a_fan_in_of_10000_jobs_runs_its_callback_exactly_once(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "summary.txt"
    noop, rec = job("tests.jobs.noop"), job("tests.jobs.record")
    t0 = time.monotonic()
    res = group([noop.s(i) for i in range(10_000)], then=rec.s(str(out), "summary"))
    scheduled = time.monotonic() - t0
    assert res.then is not None
    start_worker("--concurrency", "8")
    t1 = time.monotonic()
    wait_until(lambda: succeeded(res.then.id) == 1, timeout=600, step=0.2)  # type: ignore[union-attr]
    ran = time.monotonic() - t1
    assert succeeded(*res.ids) == 10_000
    assert tags(out) == ["summary"]
    assert not JobDependency.objects.filter(resolved=False).exists()
    print("fan-in 10,000: group() %.1fs, members and callback run in %.1fs" % (scheduled, ran))


@pytest.fixture
def start_reconciling_worker(delayq_settings, tmp_path):  # type: ignore[no-untyped-def]
    """Workers whose reconciler enqueues a released child the kill kept from Redis after
    1 s, not 60 s (tests/worker/reconcile_settings.py)."""
    yield from worker_starter(delayq_settings, tmp_path, "tests.worker.reconcile_settings")


def test_a_worker_killed_while_it_releases_children_loses_and_doubles_none(  # type: ignore[no-untyped-def]
        start_reconciling_worker, delayq_settings, tmp_path) -> None:
    start_worker = start_reconciling_worker
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "LEASE_SECONDS": 2}
    out = tmp_path / "runs.txt"
    noop, rec = job("tests.jobs.noop"), job("tests.jobs.record")
    pairs = [chain(noop.s(i), rec.s(str(out), "child%d" % i)) for i in range(300)]
    res = group([noop.s(i) for i in range(2_000)], then=rec.s(str(out), "summary"))
    children = [child.id for _, child in pairs]
    first = start_worker("--concurrency", "8")
    # Kill it while it settles parents and releases their children.
    wait_until(lambda: succeeded(*children) >= 20, timeout=120, step=0.005)
    first.send_signal(signal.SIGKILL)
    first.wait()
    start_worker("--concurrency", "8")
    wait_until(lambda: succeeded(*children) == 300 and succeeded(res.then.id) == 1,  # type: ignore[union-attr]
               timeout=300, step=0.2)
    assert released_once(out, "summary")  # after all 2,000 members, once
    assert all(released_once(out, "child%d" % i) for i in range(300))  # none lost or doubled
    assert not Job.objects.filter(status=JobStatus.WAITING).exists()
    assert not JobDependency.objects.filter(resolved=False).exists()
    assert not Job.objects.exclude(parents_left=0).exists()  # no edge counted twice
