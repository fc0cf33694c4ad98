"""Round-robin among groups with a real worker process: light groups scheduled after a
heavy group's backlog start near the beginning of the drain, not after the backlog; every
job runs once. Starts are measured by the jobs themselves."""

from __future__ import annotations

from collections.abc import Callable
from subprocess import Popen

import pytest

from django_delayq.core.api import JobSpec, schedule_many
from django_delayq.models import Job, JobStatus
from tests.helpers import wait_until
from tests.worker.test_runtime_limits import lines, started, stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

HEAVY, LIGHT_GROUPS, LIGHT_EACH = 600, 10, 3


def test_light_groups_start_before_the_heavy_backlog_is_drained(
        start_worker: Callable[..., Popen[str]], tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = str(tmp_path / "starts.txt")
    schedule_many("tests.jobs_more.hold", [JobSpec(args=[out, "h%d" % i, 0.005])
                                           for i in range(HEAVY)], group="heavy")
    for g in range(LIGHT_GROUPS):
        schedule_many("tests.jobs_more.hold", [JobSpec(args=[out, "l%d-%d" % (g, i), 0.005])
                                               for i in range(LIGHT_EACH)], group="l%d" % g)
    total = HEAVY + LIGHT_GROUPS * LIGHT_EACH
    procs = started(start_worker, 1, "--concurrency", "4")
    wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == total,
               timeout=180, step=0.2)
    stop(procs)
    runs = sorted(lines(tmp_path / "starts.txt"), key=lambda r: float(r[1]))
    tags = [r[0] for r in runs]
    assert sorted(tags) == sorted(set(tags)) and len(tags) == total  # each once
    light = [rank for rank, tag in enumerate(tags) if tag.startswith("l")]
    # Ungrouped, the light jobs would start last (ranks 600..629). In turns, the first claim
    # takes them all (3 rounds of 11 groups); the worker starts a claimed batch in due
    # order, so some heavy jobs of the batch come first: well before the backlog's end.
    assert max(light) < total // 3, str((light, [t for t in tags if t.startswith("l")]))
