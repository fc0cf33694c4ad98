"""Workers SIGKILLed again and again while they run grouped jobs under group limits: the
leases taken back free the groups' concurrency slots (recover.lua), no group ever holds
more slots than its limit, every job ends succeeded, and once the queue is drained the
slot counters are back to zero and no group is held (nothing leaks). Real
``delayq_worker`` subprocesses, two at a time, short leases. Invariant 9 of
docs/internals.md under SIGKILL."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from django_delayq import JobSpec, schedule_many, set_group_limit
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus
from tests import jobs_chaos
from tests.helpers import wait_until
from tests.reliability.conftest import kill, stop

if TYPE_CHECKING:
    from django_delayq.engine import Engine

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LIMITED = {"LEASE_SECONDS": 1.5, "RECOVER_INTERVAL_SECONDS": 0.2,
           "RECONCILE_INTERVAL_SECONDS": 0.5, "RECONCILE_GRACE_SECONDS": 1,
           "QUEUE_OPTIONS": {"default": {"group_concurrency": 2}}}
GROUPS, EACH, ROUNDS = 5, 40, 3
LIMIT = {"g0": 1, "g1": 2, "g2": 2, "g3": 2, "g4": 2}  # g0: its own override


class Slots:
    """The most slots each group was seen holding (``Engine.group_slots``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.most: dict[str, int] = {}

    def look(self) -> dict[str, int]:
        now = self.engine.group_slots("default")
        for group, n in now.items():
            self.most[group] = max(self.most.get(group, 0), n)
        return now


def test_killed_workers_free_their_group_slots(start_with, tmp_path) -> None:  # type: ignore[no-untyped-def]
    runs = str(tmp_path)
    set_group_limit("default", "g0", concurrency=1)
    ids = [i for g in range(GROUPS) for i in schedule_many(
        "tests.jobs_chaos.mark_run", [JobSpec(args=(runs, 0.03)) for _ in range(EACH)],
        group="g%d" % g, max_attempts=20)]
    engine = get_engine()
    slots = Slots(engine)
    for k in range(ROUNDS):
        procs = [start_with(LIMITED, "--concurrency", "4") for _ in range(2)]
        target = min(len(ids), (k + 1) * len(ids) // (ROUNDS + 2))
        wait_until(lambda t=target: slots.look() and len(jobs_chaos.marked_runs(runs)) >= t,
                   timeout=120, step=0.02)
        wait_until(lambda: sum(slots.look().values()) > 0, timeout=30, step=0.01)
        for proc in procs:
            kill(proc)  # mid-run: leases, and their slots, left behind
        assert sum(slots.look().values()) > 0  # the dead workers' slots are still held
    proc = start_with(LIMITED, "--concurrency", "4")
    done = Job.objects.filter(id__in=ids, status=JobStatus.SUCCEEDED)
    wait_until(lambda: slots.look() is not None and done.count() == len(ids), timeout=180,
               step=0.05)
    wait_until(lambda: engine.stats("default").inflight == 0, timeout=30)
    stop(proc)
    assert set(jobs_chaos.marked_runs(runs)) == set(ids)  # every job ran
    assert done.filter(attempts__gt=1).exists()  # killed runs were taken back and charged
    assert all(n <= LIMIT[g] for g, n in slots.most.items()), slots.most
    assert slots.most.get("g0") == 1 and max(slots.most.values()) == 2
    assert engine.group_slots("default") == {}  # every counter back to zero
    assert engine.held_groups("default") == {}
    k = engine.keys("default")
    assert engine.client.zcard(k.group_running) == 0
    assert engine.client.zcard(k.group_ready) == 0 and engine.client.zcard(k.group_turns) == 0
