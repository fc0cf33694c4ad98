"""Workers drained and started again while Redis is down: the audit shows every run, and
no run that did not happen. A drained worker that could not leave the workers registry
(Redis unreachable) records its clean stop in the database (``core/worker_stops.py``);
its silent entry then makes no reconciler charge an attempt it "may have run"."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.core.reconcile_state import UNRECORDED
from django_delayq.models import Job, JobAttempt, StoppedWorker
from django_delayq.worker.retention import Retention, forget_after_ms
from tests import jobs_chaos
from tests.helpers import point_at, wait_until
from tests.reliability.conftest import stop
from tests.reliability.test_lease import _beat, _reenqueued_attempt
from tests.reliability.test_once import _all_final, _schedule
from tests.reliability.test_once import runs_dir as runs_dir  # the fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

# The outbox rows are written within a lease of the stopped workers' last heartbeat (their
# entries count as active since those rows then). A long lease, for a loaded host: a new
# worker counts as silent (its outbox rows charged: conservative, not what this checks)
# only once it misses beats for 8 s, and the registry forgets the stopped workers' entries
# (a retention round, every 20 s from a worker's start) only once they are silent 37.5 s.
LEASE = 12.0
FAST = {"LEASE_SECONDS": LEASE, "RECOVER_INTERVAL_SECONDS": 0.2,
        "RECONCILE_INTERVAL_SECONDS": 0.5, "RECONCILE_GRACE_SECONDS": 1}


def test_workers_drained_during_an_outage_leave_no_false_unrecorded_attempts(  # type: ignore[no-untyped-def]
        cfg, start_with, runs_dir, fault_server) -> None:
    point_at(cfg, fault_server)  # AOF: Redis comes back with its data, no loss
    ids = _schedule(runs_dir, n=40, seconds=0.02)
    old = ["old-%d" % i for i in range(2)]
    first = [start_with(FAST, "--worker-id", w, "--concurrency", "4") for w in old]
    wait_until(lambda: _registered() >= set(old), timeout=60, step=0.05)  # both started
    _all_final(timeout=60)
    fault_server.stop()
    outbox = _schedule(runs_dir, n=60, seconds=0.02)  # Redis down at commit: the outbox
    for proc in first:
        stop(proc)  # drained: nothing held, its audit written; it cannot unregister
    assert {w.split(":")[0] for w in StoppedWorker.objects.values_list("worker_id", flat=True)
            } == set(old)
    second = [start_with(FAST, "--concurrency", "4") for _ in range(2)]
    fault_server.start()
    _all_final(timeout=120)
    # the old entries were still registered, silent, when the outbox rows were decided (an
    # entry forgotten never comes back): what the reconcilers looked at. Checked before the
    # new workers stop, as a retention round of theirs may forget them after.
    assert _registered() >= set(old), "the stopped workers' entries were forgotten"
    for proc in second:
        stop(proc)
    ran = jobs_chaos.marked_runs(runs_dir)
    assert set(ran) == ids | outbox
    again = [job_id for job_id, attempts in ran.items() if attempts != [1]]
    assert not again, "%d job(s) ran twice or as attempt 2" % len(again)
    false = list(JobAttempt.objects.filter(error=UNRECORDED).values_list("job_id", flat=True))
    assert not false, "%d attempt row(s) of runs that never happened" % len(false)
    assert set(Job.objects.filter(pk__in=outbox).values_list("attempts", flat=True)) == {1}


def _registered() -> set[str]:
    """The names of the registered workers (an id is the name, ":", a token of its start)."""
    return {w.split(":")[0] for w, _ in get_engine().beats_since(0)}


@pytest.mark.parametrize(("stopped_after_beat", "attempt"), [
    (None, 2),  # no clean stop recorded: it may have died after running the job
    (True, 1),  # stopped cleanly after its last beat: every run it made is recorded
    (False, 2),  # a stop dated before the beat (a stopping host's clock behind): not trusted
])
def test_a_silent_worker_charges_an_outbox_row_unless_it_recorded_a_clean_stop(  # type: ignore[no-untyped-def]
        settings, fault_server, stopped_after_beat, attempt) -> None:
    point_at(settings, fault_server)
    engine, s = get_engine(), get_settings()
    r = Reconciler(engine, s, ("default",))
    r.check_epochs()  # the epoch exists: Redis coming back is no loss
    fault_server.stop()
    h = schedule("tests.jobs_chaos.record")  # the outbox
    fault_server.start()
    age_ms = 0.8 * s.lease_ms  # silent (two heartbeat periods), yet active since the row
    _beat("drained", age_ms)
    if stopped_after_beat is not None:
        at = h.job.updated_at - timedelta(milliseconds=(0.2 if stopped_after_beat else 1.4)
                                          * s.lease_ms)
        StoppedWorker.objects.create(worker_id="drained", stopped_at=at)
    assert r.run_all(grace_seconds=0) == 1
    assert _reenqueued_attempt(h.id) == attempt
    charged = JobAttempt.objects.filter(job_id=h.id, error=UNRECORDED).count()
    assert charged == attempt - 1


def test_a_reconciler_without_the_clean_stops_table_charges_as_before(  # type: ignore[no-untyped-def]
        settings, fault_server, caplog) -> None:
    """Code running before ``migrate`` created the table (a rolling deploy): no clean stop
    is known, the silent entry is charged, and the pass does not fail."""
    point_at(settings, fault_server)
    engine, s = get_engine(), get_settings()
    r = Reconciler(engine, s, ("default",))
    r.check_epochs()
    fault_server.stop()
    h = schedule("tests.jobs_chaos.record")
    fault_server.start()
    _beat("drained", 0.8 * s.lease_ms)
    with connection.schema_editor() as editor:
        editor.delete_model(StoppedWorker)
    try:
        with caplog.at_level(logging.WARNING, logger="django_delayq.core.worker_stops"):
            assert r.run_all(grace_seconds=0) == 1
    finally:
        with connection.schema_editor() as editor:
            editor.create_model(StoppedWorker)
    assert _reenqueued_attempt(h.id) == 2
    assert JobAttempt.objects.filter(job_id=h.id, error=UNRECORDED).count() == 1
    assert "clean stops unreadable" in caplog.text


def test_retention_deletes_the_clean_stop_of_a_worker_the_registry_forgets(  # type: ignore[no-untyped-def]
        settings, fault_server) -> None:
    point_at(settings, fault_server)
    s = get_settings()
    _beat("long-gone", forget_after_ms(s) + 60_000)
    _beat("lately", s.lease_ms)  # silent, not yet forgotten: its stop still explains it
    StoppedWorker.objects.bulk_create([StoppedWorker(worker_id=w) for w in ("long-gone", "lately")])
    # an entry a Redis data loss took (never forgotten): its stop goes past the horizon
    StoppedWorker.objects.create(worker_id="lost", stopped_at=timezone.now() - timedelta(
        milliseconds=forget_after_ms(s) + 60_000))
    Retention(get_engine(), s, "leader")._forget_dead_workers()
    assert _registered() == {"lately"}
    assert list(StoppedWorker.objects.values_list("worker_id", flat=True)) == ["lately"]
