"""A lease token is never handed out twice by the put-backs that are not a delivery's
end: ``requeue()`` of a job that went dead while a hung worker still held it, the
keeper's put-back of a periodic tick Redis lost under a worker holding it, a purge's
put-back of a tick whose earlier lease a hung worker outlived, and a give-back sent twice
(a reply lost, the call sent again) after another worker claimed the job. Each time the stale holder's extend, ack or give-back is refused, and the
attempt numbering is unchanged."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from django_delayq import requeue, schedule
from django_delayq.core import periodic, queues, tick_presence
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus, Schedule
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.housekeeping import LeaseRecovery
from django_delayq.worker.outcome import Kind, Outcome
from django_delayq.worker.settle import Settler
from tests.helpers import point_at, wait_until
from tests.reliability.test_loss_attempts import LEASE_MS, _claim

pytestmark = pytest.mark.django_db(transaction=True)


def _refused(held) -> None:  # type: ignore[no-untyped-def]
    """The stale holder's heartbeat, ack and give-back change nothing."""
    engine = get_engine()
    assert not engine.extend("default", [(held.id, held.token)], LEASE_MS)[0]
    assert not engine.ack("default", [(held.id, held.token)])[0]
    assert engine.release("default", [held]) == [False]


def test_a_requeued_dead_job_never_hands_its_hung_worker_s_token_out_again(  # type: ignore[no-untyped-def]
        settings, redis_server) -> None:
    point_at(settings, redis_server, LEASE_SECONDS=2)
    h = schedule("tests.jobs.noop", max_attempts=1)
    engine = get_engine()
    [hung] = engine.claim("default", 10, lease_ms=1).jobs  # worker A: its lease runs out
    assert engine.mark_started([hung]) == 1  # A started it, then hung
    wait_until(lambda: engine.stats("default").expired_leases == 1)
    audit = AuditWriter(0.05, 100)
    recovery = LeaseRecovery(engine, get_settings(), audit)

    def ended() -> bool:  # once this worker's calls have run unbroken half a lease
        recovery.recover("default")
        return engine.inspect("default", h.id).place == "dead"

    wait_until(ended, timeout=30)  # its one attempt spent: dead
    audit.flush()
    assert Job.objects.get(pk=h.id).status == JobStatus.DEAD
    requeue(h.id)  # an operator's
    again = _claim(h.id)  # worker B
    assert again.attempt == 1  # a fresh set of attempts
    assert again.token > hung.token, (again.token, hung.token)
    _refused(hung)  # A wakes: nothing it sends touches B's delivery
    assert engine.ack("default", [(again.id, again.token)]) == [True]


def _tick_due_now() -> str:
    """A schedule's first tick job, due now (in Redis, its row ``scheduled``)."""
    start = timezone.now().replace(microsecond=0)
    s = Schedule.objects.create(name="each-minute", callable_path="tests.jobs.noop",
                                interval_seconds=60, start_at=start)
    job_id = periodic.keep(s, now=start)
    assert job_id is not None
    return job_id


def test_a_tick_put_back_after_a_loss_never_hands_a_held_copy_s_token_out_again(  # type: ignore[no-untyped-def]
        settings, volatile_server) -> None:
    point_at(settings, volatile_server)
    job_id = _tick_due_now()
    held = _claim(job_id)  # a worker W holds the tick, not started (its row: scheduled)
    volatile_server.restart()  # every key gone
    Job.objects.filter(pk=job_id).update(updated_at=timezone.now() - timedelta(seconds=10))
    assert tick_presence.put_back([job_id]) == (set(), 1)  # the keeper's put-back
    again = _claim(job_id)
    assert again.attempt == 1  # never ran: not charged
    assert again.token > held.token, (again.token, held.token)
    _refused(held)
    assert get_engine().ack("default", [(again.id, again.token)]) == [True]


def test_a_tick_a_purge_keeps_never_hands_a_hung_worker_s_token_out_again(  # type: ignore[no-untyped-def]
        settings, redis_server) -> None:
    point_at(settings, redis_server)
    job_id = _tick_due_now()
    engine = get_engine()
    [hung] = engine.claim("default", 10, lease_ms=1).jobs  # worker W, hung before starting
    wait_until(lambda: engine.stats("default").expired_leases == 1)
    [back] = engine.recover("default")
    assert back.id == job_id and back.outcome.name == "NOT_STARTED"  # waiting again
    report = queues.purge_queue_report("default")  # an operator's: the tick is kept
    assert (report.removed, report.ticks_kept) == (0, 1)
    again = _claim(job_id)
    assert again.attempt == 1  # never ran: not charged
    assert again.token > hung.token, (again.token, hung.token)
    _refused(hung)  # W wakes: its copy's lease is not the new delivery's
    assert engine.ack("default", [(again.id, again.token)]) == [True]


def test_a_give_back_sent_again_never_takes_the_next_delivery(  # type: ignore[no-untyped-def]
        settings, redis_server) -> None:
    point_at(settings, redis_server)
    h = schedule("tests.jobs.noop")
    engine = get_engine()
    first = _claim(h.id)  # worker A, shutting down: hands it back unstarted
    assert engine.release("default", [first]) == [True]
    taken = _claim(h.id)  # worker B claims it and runs it
    assert taken.attempt == 1  # the attempt A was charged was given back
    assert taken.token != first.token
    _refused(first)  # A's give-back again (its reply was lost and the call sent again)
    assert engine.inspect("default", h.id).place == "inflight"  # still B's
    assert engine.defer("default", [(taken.id, taken.token, 0)]) == [True]  # B: a limit
    last = _claim(h.id)
    assert last.attempt == 1 and last.token not in (first.token, taken.token)
    assert not engine.ack("default", [(taken.id, taken.token)])[0]
    assert engine.ack("default", [(last.id, last.token)]) == [True]


def test_a_purge_keeps_a_tick_the_keeper_just_put_back(  # type: ignore[no-untyped-def]
        settings, redis_server) -> None:
    """The put-back remembers the id (reenqueue.lua skips it for a while): the purge
    forgets that with the job, so the tick it keeps goes back at once."""
    point_at(settings, redis_server)
    job_id = _tick_due_now()
    engine = get_engine()
    assert engine.purge_pending("default") == [job_id]  # as if its send had failed
    Job.objects.filter(pk=job_id).update(updated_at=timezone.now() - timedelta(seconds=10))
    assert tick_presence.put_back([job_id]) == (set(), 1)
    report = queues.purge_queue_report("default")
    assert (report.removed, report.ticks_kept) == (0, 1)
    assert engine.inspect("default", job_id).place in ("pending", "ready")


def test_a_lost_lease_is_logged_with_its_attempt_number_not_its_token(  # type: ignore[no-untyped-def]
        settings, redis_server, caplog) -> None:
    """A token from the Redis clock is no attempt number: a copy whose lease was lost
    logs its attempt, settled or deferred."""
    point_at(settings, redis_server)
    h = schedule("tests.jobs.noop")
    engine = get_engine()
    assert engine.purge_pending("default") == [h.id]  # Redis lost it; its row: scheduled
    assert queues.reenqueue_rows([h.id]) == 1  # back under a token from the Redis clock
    stale = _claim(h.id)
    assert stale.attempt == 1 and stale.token > 10**12, stale
    assert engine.release("default", [stale]) == [True]  # due once the clock reaches
    claims: list = []  # its token (within the ms of the re-enqueue: the next ms)
    wait_until(lambda: claims.extend(engine.claim("default", 10, lease_ms=LEASE_MS).jobs)
               or claims)
    assert [(j.id, j.attempt) for j in claims] == [(h.id, 1)]  # the delivery holding it
    settler = Settler(engine, get_settings(), AuditWriter(), "w")
    now = datetime.now(UTC)
    for kind in (Kind.SUCCESS, Kind.DEFER):
        with caplog.at_level(logging.WARNING, logger="django_delayq.worker.settle"):
            settler.settle([Outcome(job=stale, kind=kind, started_at=now, finished_at=now)])
    lost = [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()]
    assert len(lost) == 2 and all("(attempt 1)" in m for m in lost), lost
