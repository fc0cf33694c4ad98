"""Attempts equal runs across Redis losses: after a loss, a re-enqueued job's next
attempt is above any attempt that may have run unrecorded, whichever reconciler runs the
loss pass (one that saw the loss or one started after it), and a lost delivery gets its
``JobAttempt``; a job that provably never ran is not charged.

The reconcilers here are the real ones, driven by ``tick()`` as a worker drives them;
the "worker" is the engine's claim, whose run never reaches the audit (killed before
its flush)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.core.reconcile_state import LOST_WITH_DATA
from django_delayq.models import Job, JobAttempt, JobStatus
from tests.helpers import point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_MS = 60_000


def _wipe(prefix: str) -> None:
    """As a restart without persistence does to this test's keys."""
    client = get_engine().client
    for key in list(client.scan_iter(match="{%s*" % prefix, count=1000)):
        client.delete(key)


def _age(seconds: float) -> None:
    """Every row as if written ``seconds`` ago (before the loss, beyond its margin)."""
    for row in Job.objects.all():
        Job.objects.filter(pk=row.pk).update(updated_at=row.updated_at - timedelta(
            seconds=seconds), run_at=row.run_at - timedelta(seconds=seconds))


def _reconciler() -> Reconciler:
    return Reconciler(get_engine(), get_settings(), ("default",))


def _put_back(reconciler: Reconciler, job_id: str) -> None:
    """Tick ``reconciler`` (as a worker's keeper does) until it put ``job_id`` back."""
    engine = get_engine()
    wait_until(lambda: reconciler.tick() >= 0
               and engine.inspect("default", job_id).place != "", timeout=60)


def _claim(job_id: str):  # type: ignore[no-untyped-def]
    """Claim what is due; the delivery of ``job_id`` among it."""
    [job] = [j for j in get_engine().claim("default", 10, lease_ms=LEASE_MS).jobs
             if j.id == job_id]
    return job


def test_a_second_loss_counts_above_the_attempt_the_first_one_charged(  # type: ignore[no-untyped-def]
        settings, redis_server) -> None:
    point_at(settings, redis_server, RECONCILE_GRACE_SECONDS=3600)
    prefix = settings.DELAYQ["PREFIX"]
    h = schedule("tests.jobs.noop")
    _age(600)
    reconciler = _reconciler()
    reconciler.tick()  # its first look: the epoch is remembered
    first = _claim(h.id)  # attempt 1 runs; its worker dies before recording it
    assert first.attempt == 1
    _wipe(prefix)
    _put_back(reconciler, h.id)
    second = _claim(h.id)  # the lost run is counted: attempt 2
    assert second.attempt == 2 and second.token > first.token
    row = Job.objects.get(pk=h.id)
    assert row.attempts == 1  # the audit counts it too, before Redis does
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list("number", flat=True)) == [1]
    _age(600)  # attempt 2 runs, unrecorded as well, and Redis loses its data again
    _wipe(prefix)
    _put_back(reconciler, h.id)
    third = _claim(h.id)
    assert third.attempt == 3 and third.token > second.token  # never attempt 2 again
    assert sorted(JobAttempt.objects.filter(job_id=h.id)
                  .values_list("number", flat=True)) == [1, 2]


def test_a_reconciler_started_after_the_loss_counts_the_lost_delivery(  # type: ignore[no-untyped-def]
        settings, redis_server) -> None:
    point_at(settings, redis_server, RECONCILE_GRACE_SECONDS=3600)
    h = schedule("tests.jobs.noop")
    done = schedule("tests.jobs.noop")
    _age(5)  # before the loss's margin, within a lease of it
    lost = _claim(h.id)  # claimed, run, its worker killed before its audit flush
    assert lost.attempt == 1
    # workers were delivering: one recorded a run moments before the loss (no running row)
    Job.objects.filter(pk=done.id).update(status=JobStatus.SUCCEEDED, attempts=1,
                                          updated_at=timezone.now() - timedelta(seconds=3))
    _wipe(settings.DELAYQ["PREFIX"])
    later = _reconciler()  # its worker started after the wipe: it never saw the epoch
    _put_back(later, h.id)
    again = _claim(h.id)
    assert again.attempt == 2 and again.token > lost.token
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list("number", flat=True)) == [1]


def test_an_ordinary_pass_of_a_reconciler_that_never_saw_the_loss_counts_it(  # type: ignore[no-untyped-def]
        settings, redis_server) -> None:
    """Its first look finds the epoch the new data already has (another reconciler, or an
    enqueue, created it): no loss for it, no loss pass. Its ordinary pass finds the row
    missing; the row was created and due before that data set began, so its job was in
    lost data, and a delivery there may be unrecorded."""
    point_at(settings, redis_server, RECONCILE_GRACE_SECONDS=1)
    h = schedule("tests.jobs.noop")
    done = schedule("tests.jobs.noop")
    _age(5)
    lost = _claim(h.id)
    assert lost.attempt == 1
    Job.objects.filter(pk=done.id).update(status=JobStatus.SUCCEEDED, attempts=1,
                                          updated_at=timezone.now() - timedelta(seconds=3))
    _wipe(settings.DELAYQ["PREFIX"])
    schedule("tests.jobs.noop")  # the new data's epoch, created by its first enqueue
    later = _reconciler()
    assert later.check_epochs() == []  # an epoch on its first look: not a loss for it
    _put_back(later, h.id)
    again = _claim(h.id)
    assert again.attempt == 2 and again.token > lost.token


def test_a_job_that_never_ran_is_not_charged(settings, redis_server) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, RECONCILE_GRACE_SECONDS=3600)
    prefix = settings.DELAYQ["PREFIX"]
    due = schedule("tests.jobs.noop")
    _age(600)
    later = schedule("tests.jobs.noop", delay=timedelta(hours=1))  # due after the loss
    reconciler = _reconciler()
    reconciler.tick()
    _wipe(prefix)
    _put_back(reconciler, later.id)
    engine = get_engine()
    assert engine.inspect("default", due.id).place != ""
    # due after the loss: no delivery to count, its first run is attempt 1
    assert engine.presence("default", [later.id])[0].attempts == 0
    assert Job.objects.get(pk=later.id).attempts == 0
    assert not JobAttempt.objects.filter(job_id=later.id).exists()


def test_a_running_attempt_whose_lease_went_with_the_data_gets_its_job_attempt(  # type: ignore[no-untyped-def]
        settings, redis_server) -> None:
    point_at(settings, redis_server, RECONCILE_GRACE_SECONDS=3600)
    h = schedule("tests.jobs.noop")
    reconciler = _reconciler()
    reconciler.tick()
    running = _claim(h.id)  # its start was recorded, then its worker was killed
    Job.objects.filter(pk=h.id).update(status=JobStatus.RUNNING, attempts=running.attempt,
                                       worker_id="gone:1:abcdef")
    _age(600)
    _wipe(settings.DELAYQ["PREFIX"])  # before its lease ran out: no recovery records it
    _put_back(reconciler, h.id)
    [lost] = JobAttempt.objects.filter(job_id=h.id)
    assert (lost.number, lost.error) == (1, LOST_WITH_DATA)
    assert Job.objects.get(pk=h.id).status == JobStatus.RETRYING  # as after a lost lease
    assert _claim(h.id).attempt == 2
