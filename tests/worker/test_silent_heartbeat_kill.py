"""A job that holds the GIL starves its process's heartbeat thread. Under
``delayq_worker --processes`` the supervisor SIGKILLs a child whose heartbeat stays
silent while it holds jobs, before their leases lapse, and takes its jobs back: a job
never runs twice at once. A child stuck that way whose supervisor dies does not outlive
it for long (its dead man's switch). Real processes, real signals; each run of the job
records its start and whether another copy held its lock file at that moment."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_delayq import schedule
from django_delayq.models import JobStatus
from django_delayq.worker.processes.supervisor import silence_allowed_s
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import wait_until
from tests.worker.test_hard_time_limit import alive, children

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LEASE_LOST = "django_delayq.exceptions.LeaseLost"
LEASE_S = 10  # the silence allowed is 8 s: 2 s of margin for the kill on a busy machine
SWITCH_LEASE_S = 5  # the dead man's switch test: ended two leases after its last beat


def starts(path: Path) -> list[list[str]]:
    """record()'s lines of hold_the_gil_alone: start-alone|start-overlap, id, attempt, pid."""
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def lease(delayq_settings) -> int:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "LEASE_SECONDS": LEASE_S}
    return LEASE_S


@pytest.fixture
def switch_lease(delayq_settings) -> int:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "LEASE_SECONDS": SWITCH_LEASE_S}
    return SWITCH_LEASE_S


@pytest.fixture
def stuck_pids() -> Iterator[list[int]]:
    """Processes of the GIL-holding job: SIGKILLed after the test should one survive (a
    failed test must not leave a CPU busy for minutes)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_silence_allowed_leaves_a_margin_before_the_lease() -> None:
    assert silence_allowed_s(10) == 8.0
    assert silence_allowed_s(3) == 2.0
    assert silence_allowed_s(60) == 48.0
    assert silence_allowed_s(1) == 0.5


def test_a_child_whose_heartbeat_falls_silent_is_killed_before_its_leases_lapse(  # type: ignore[no-untyped-def]
        lease, start_worker, tmp_path, stuck_pids) -> None:
    out = tmp_path / "runs.txt"
    h = schedule("tests.jobs.hold_the_gil_alone", str(out), max_attempts=2, backoff=[0.5])
    proc = start_worker("--processes", "2", "--concurrency", "2")
    wait_until(lambda: len(starts(out)) >= 1, timeout=60)
    stuck_pids.append(int(starts(out)[0][3]))
    wait_until(lambda: h.status == JobStatus.DEAD, timeout=120)
    runs = starts(out)
    stuck_pids.extend(int(r[3]) for r in runs[1:])
    assert [r[0] for r in runs] == ["start-alone", "start-alone"]  # never two at once
    assert len({r[3] for r in runs}) == 2  # each run in its own process
    wait_until(lambda: not any(alive(pid) for pid in stuck_pids), timeout=30)  # killed
    attempts = list(h.job.attempt_history.order_by("number"))
    assert [(a.number, a.error_type) for a in attempts] == [(1, LEASE_LOST), (2, LEASE_LOST)]
    assert all("stopped heartbeating" in a.error for a in attempts)
    log = (tmp_path / "worker-0.log").read_text()
    assert log.count("killing it before its leases lapse") == 2
    wait_until(lambda: len(children(proc.pid)) == 2, timeout=60)  # replaced
    after = schedule("tests.jobs.add", 1, 2)
    wait_until(lambda: after.status == JobStatus.SUCCEEDED, timeout=60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == EXIT_OK


def test_a_child_stuck_holding_the_gil_does_not_outlive_its_supervisor(  # type: ignore[no-untyped-def]
        switch_lease, start_worker, tmp_path, stuck_pids) -> None:
    out = tmp_path / "runs.txt"
    schedule("tests.jobs.hold_the_gil_alone", str(out), max_attempts=1)
    proc = start_worker("--processes", "1", "--concurrency", "2")
    wait_until(lambda: len(starts(out)) == 1, timeout=60)
    stuck_pids.append(int(starts(out)[0][3]))
    proc.send_signal(signal.SIGKILL)  # the supervisor dies; its child is stuck in C
    proc.wait()
    # ended by its dead man's switch two leases after its last heartbeat (or, on a machine
    # so busy the supervisor lived that long, by the supervisor before that)
    wait_until(lambda: not alive(stuck_pids[0]), timeout=2 * switch_lease + 60)
