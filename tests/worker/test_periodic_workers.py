"""An every-second schedule served by 3 real ``delayq_worker`` processes for 2 minutes:
exactly one run per tick (no tick runs twice, no two runs share a tick), and the ticks go
on without a singleton process. Slow (about 2.5 minutes): ``-m slow`` selects it; ``make
test`` runs it with the rest."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from django_delayq.core import periodic
from django_delayq.models import Job, Schedule
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker, pytest.mark.slow]

WINDOW_S = 60


def test_three_workers_run_each_tick_of_an_every_second_schedule_exactly_once(  # type: ignore[no-untyped-def]
        start_worker, tmp_path) -> None:
    out = tmp_path / "runs.txt"
    s = Schedule.objects.create(name="every-second", callable_path="tests.jobs.record",
                                args=[str(out), "tick"], interval_seconds=1)
    procs = [start_worker() for _ in range(3)]
    wait_until(out.exists, timeout=60)  # the first keeper pass made a tick
    started = time.monotonic()
    wait_until(lambda: time.monotonic() - started >= WINDOW_S, timeout=WINDOW_S + 30, step=1)
    Schedule.objects.filter(pk=s.pk).update(enabled=False)
    s.refresh_from_db()
    periodic.replace(s)  # what an admin "disable" does: the pending tick job is cancelled
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(60) for proc in procs] == [EXIT_OK] * 3

    runs = [line.split() for line in out.read_text().splitlines()]
    per_job = Counter(job_id for _, job_id, _, _ in runs)
    assert max(per_job.values()) == 1  # no job ran twice
    keys = dict(Job.objects.filter(pk__in=per_job).values_list("id", "key"))
    ticks = Counter(periodic.tick_of_key(keys[job_id]) for job_id in per_job)
    assert None not in ticks and max(ticks.values()) == 1  # one run per tick
    span = (max(ticks) - min(ticks)).total_seconds()  # type: ignore[type-var,operator]
    assert span >= WINDOW_S
    assert len(ticks) >= 0.9 * (span + 1), (len(ticks), span)  # a busy machine may skip some
    assert len({pid for *_, pid in runs}) >= 2  # not one process doing all the work
    print("periodic: %d runs, %d distinct ticks over %.0f s, per process %s" % (
        len(runs), len(ticks), span, sorted(Counter(pid for *_, pid in runs).values())))
