"""Workers SIGKILLed again and again while they run grouped jobs: the leases taken back put
the jobs back in their groups' turns, every job ends succeeded, and the group index,
the rotation and the jobs' groups in Redis are empty once the queue is drained (nothing
of a group leaks). A real ``delayq_worker`` subprocess, short leases."""

from __future__ import annotations

import pytest

from django_delayq import JobSpec, schedule_many
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus
from tests import jobs_chaos
from tests.helpers import wait_until
from tests.reliability.conftest import kill, stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

FAST = {"LEASE_SECONDS": 1.5, "RECOVER_INTERVAL_SECONDS": 0.2,
        "RECONCILE_INTERVAL_SECONDS": 0.5, "RECONCILE_GRACE_SECONDS": 1}
GROUPS, EACH, KILLS = 5, 40, 3


def test_killed_workers_leave_no_group_state_behind(start_with, tmp_path) -> None:  # type: ignore[no-untyped-def]
    runs = str(tmp_path)
    ids = [i for g in range(GROUPS) for i in schedule_many(
        "tests.jobs_chaos.mark_run", [JobSpec(args=(runs, 0.02)) for _ in range(EACH)],
        group="g%d" % g, max_attempts=10)]
    done = Job.objects.filter(id__in=ids, status=JobStatus.SUCCEEDED)
    for k in range(KILLS):
        proc = start_with(FAST, "--concurrency", "4")
        target = min(len(ids), (k + 1) * len(ids) // (KILLS + 2))
        wait_until(lambda t=target: len(jobs_chaos.marked_runs(runs)) >= t, timeout=90)
        kill(proc)  # mid-run: leases of running and claimed jobs left behind
    proc = start_with(FAST, "--concurrency", "4")
    wait_until(lambda: done.count() == len(ids), timeout=120, step=0.2)
    engine = get_engine()
    k = engine.keys("default")
    wait_until(lambda: engine.stats("default").inflight == 0, timeout=30)
    stop(proc)
    assert set(jobs_chaos.marked_runs(runs)) == set(ids)  # every job ran
    assert done.filter(attempts__gt=1).exists()  # killed runs were taken back and charged
    assert engine.client.zcard(k.group_ready) == 0  # no index entry left
    assert engine.client.zcard(k.group_turns) == 0  # no group left in the rotation
    assert engine.client.hlen(k.group) == 0  # every job's group forgotten with it
