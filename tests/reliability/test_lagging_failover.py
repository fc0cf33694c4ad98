"""A failover to a lagging replica hands a lease token out a second time: the new master
never saw the claim the old one answered after replication stopped, so it counts one
delivery fewer and its next claim of the job gives the same token (the row, which the
first run's start reached, makes it attempt 2). The first delivery's ack, sent late (Redis
was down when its run ended), is then accepted on the new master: it settles the second
delivery's lease, and its record (attempt 1) is dropped by the audit's guard (the row says
attempt 2). The second run's ack is refused: it must not take the settled record of a
lower attempt for another delivery's, or its row stays ``running`` for as long as its
worker lives while Redis holds the job nowhere (the reconciler leaves a live worker's
rows to it). A second run that fails has its nack refused alike: its failure is recorded,
and the job, settled in Redis by the first run, is not run a third time. The settled
record (its lease token with it) is what tells such a refusal from a lost lease: it stays
while the first run's row write is kept by the guard, as a worker wires its audit writer
(``after_write``) and forgets the records of rows that landed every round."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from django_delayq import cancel, schedule, signals
from django_delayq.core import payloads
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.outcome import expired
from django_delayq.worker.runner import Kind, Outcome
from django_delayq.worker.settle import Settler
from tests.helpers import point_at

if TYPE_CHECKING:
    from django_delayq.engine import ClaimedJob

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cfg(settings, redis_server, exec_table):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    return settings


def success(job: ClaimedJob) -> Outcome:
    now = datetime.now(UTC)
    return Outcome(job=job, kind=Kind.SUCCESS, path="tests.jobs_chaos.record", started_at=now,
                   finished_at=now)


def failure(job: ClaimedJob, kind: Kind = Kind.RETRY, error: str = "boom") -> Outcome:
    now = datetime.now(UTC)
    return Outcome(job=job, kind=kind, path="tests.jobs_chaos.record", started_at=now,
                   finished_at=now, error=error, error_type="builtins.ValueError",
                   traceback="Traceback: " + error,
                   retry_delay_ms=0 if kind is Kind.RETRY else None)


@contextmanager
def lifecycle_signals() -> Iterator[list[tuple[object, dict]]]:
    """The lifecycle signals sent meanwhile: (signal, its arguments)."""
    sent: list[tuple[object, dict]] = []
    receiver = lambda signal, **kw: sent.append((signal, kw))  # noqa: E731
    lifecycle = (signals.job_retrying, signals.job_dead, signals.job_cancelled,
                 signals.job_succeeded)
    for signal in lifecycle:
        signal.connect(receiver, weak=False)
    try:
        yield sent
    finally:
        for signal in lifecycle:
            signal.disconnect(receiver)


def snapshot() -> dict[bytes, tuple[int, bytes]]:
    """The queue's keys as a replica holds them when replication stops."""
    client, prefix = get_engine().client, get_engine().prefix
    return {key: (max(client.pttl(key), 0), client.dump(key))
            for key in client.scan_iter(match="{%s*" % prefix, count=1000)}


def fail_over_to(replica: dict[bytes, tuple[int, bytes]]) -> None:
    """The replica promoted: what the old master took since the snapshot is gone."""
    client, prefix = get_engine().client, get_engine().prefix
    for key in list(client.scan_iter(match="{%s*" % prefix, count=1000)):
        client.delete(key)
    for key, (ttl, value) in replica.items():
        client.restore(key, ttl, value, replace=True)


class Failover:
    """One job claimed and started by "w1" (attempt 1), a failover to a replica that never
    saw it, the job claimed again under the same token and started by ``second`` (attempt
    2) (cancelled then, when ``cancelled``), and the first run's end (``first_ends``:
    a success) settled late: accepted, it ended the second delivery. The audit writers are
    wired as a worker wires them (``after_write``), and "w1" runs its next round's
    ``forget_landed``: its row write, kept by the guard, did not land, so its settled
    record stays, with the lease's token."""

    def __init__(self, second: str, first_ends: Callable[[ClaimedJob], Outcome] | None = None,
                 cancelled: bool = False) -> None:
        self.handle = schedule("tests.jobs_chaos.record")
        self.engine, settings = get_engine(), get_settings()
        replica = snapshot()
        self.audit = {name: AuditWriter() for name in ("w1", "w2")}
        self.settler = {name: Settler(self.engine, settings, self.audit[name], name)
                        for name in ("w1", "w2")}
        for name in ("w1", "w2"):  # as Settlement wires them
            self.audit[name].after_write = self.settler[name].landed
        [first] = payloads.read(self.engine.claim("default", 10, 60_000).jobs, claimed=True).run
        assert self.settler["w1"].started(first)  # its run starts; the row says so
        self.audit["w1"].flush()
        fail_over_to(replica)  # the claim and the start mark were never replicated
        [self.second] = payloads.read(
            self.engine.claim("default", 10, 60_000).jobs, claimed=True).run
        assert (first.token, first.attempt, self.second.token, self.second.attempt) == (
            1, 1, 1, 2)
        assert self.settler[second].started(self.second)
        self.audit[second].flush()
        if cancelled:
            cancel(self.handle.id)  # running: marked, ended by its settlement
        # sent again once Redis answers: accepted
        self.settler["w1"].settle([(first_ends or success)(first)])
        self.audit["w1"].flush()
        self.settler["w1"].forget_landed()  # its next round
        assert self.engine.inspect("default", self.handle.id).place == ""  # its lease went
        [where] = self.engine.presence("default", [self.handle.id])
        assert where.settled is not None and (where.settled.attempt, where.settled.token) == (
            1, 1), "the first run's record went, though its row write was kept by the guard"

    def reconcile(self) -> None:
        for name in ("w1", "w2"):  # both alive: the reconciler leaves their rows to them
            self.engine.register_worker(name, "{}")
        Reconciler(self.engine, get_settings(), ("default",)).run_all(grace_seconds=0)


@pytest.mark.parametrize("second_worker", ["w1", "w2"], ids=["same-worker", "other-worker"])
def test_a_run_whose_lease_a_stale_ack_took_after_a_failover_ends_its_row(  # type: ignore[no-untyped-def]
        cfg, caplog, second_worker) -> None:
    f = Failover(second_worker)
    with caplog.at_level(logging.WARNING, logger="django_delayq.worker.settle"):
        f.settler[second_worker].settle([success(f.second)])  # refused: no longer in flight
    f.audit[second_worker].flush()
    f.reconcile()
    row = Job.objects.get(pk=f.handle.id)
    assert (row.status, row.attempts, row.worker_id) == (
        JobStatus.SUCCEEDED, 2, second_worker), caplog.text
    assert "lease lost before it was settled" not in caplog.text


@pytest.mark.parametrize("kind", [Kind.RETRY, Kind.DEAD])
@pytest.mark.parametrize("second_worker", ["w1", "w2"], ids=["same-worker", "other-worker"])
def test_a_failed_run_whose_lease_a_stale_ack_took_after_a_failover_is_recorded(  # type: ignore[no-untyped-def]
        cfg, caplog, second_worker, kind) -> None:
    """The second run fails: its nack is refused as the ack was. Redis holds the job
    settled by the first run's success, so no retry may run (a third run): the failed
    attempt is recorded (its ``JobAttempt``, with its error) and the row ends as Redis
    holds the job, ``succeeded``, at attempt 2 (the first run's record of attempt 1 is not
    written over the row); no ``job_retrying`` or ``job_dead``, whose promise (a retry,
    an end without success) would be false. Its worker then gone, the reconciler leaves
    the final row (a row left ``running`` would be run a third time)."""
    f = Failover(second_worker)
    with lifecycle_signals() as sent, caplog.at_level(
            logging.WARNING, logger="django_delayq.worker.settle"):
        f.settler[second_worker].settle([failure(f.second, kind)])  # refused
    f.audit[second_worker].flush()
    f.reconcile()
    row = Job.objects.get(pk=f.handle.id)
    assert (row.status, row.attempts, row.worker_id, row.last_error) == (
        JobStatus.SUCCEEDED, 2, second_worker, "boom"), caplog.text
    assert [(a.number, a.outcome, a.error, a.worker_id) for a in JobAttempt.objects.filter(
        job_id=f.handle.id)] == [(2, JobStatus.SUCCEEDED, "boom", second_worker)]
    assert sent == [] and "lease lost before it was settled" not in caplog.text
    assert "Redis holds it settled by attempt 1" in caplog.text
    f.engine.unregister_worker(second_worker)
    Reconciler(f.engine, get_settings(), ("default",)).run_all(grace_seconds=0)
    assert Job.objects.get(pk=f.handle.id).status == JobStatus.SUCCEEDED
    assert f.engine.inspect("default", f.handle.id).place == ""  # not retried


def test_a_failed_run_of_a_job_a_stale_copy_settled_cancelled_sends_no_second_signal(  # type: ignore[no-untyped-def]
        cfg) -> None:
    """The job is cancelled while the second delivery runs it, and the first run's failure,
    settled late, ends it cancelled ("c" record): that run sends ``job_cancelled`` (as
    ``cancel()`` did). The second run's failure, refused, is recorded (row ``cancelled``
    at attempt 2, its ``JobAttempt``) and sends no lifecycle signal: the job's were sent."""
    with lifecycle_signals() as sent:
        f = Failover("w2", lambda job: failure(job, error="first"), cancelled=True)
        before = list(sent)
        assert [(s, kw["running"]) for s, kw in before] == [(signals.job_cancelled, True)] * 2
        f.settler["w2"].settle([failure(f.second, error="second")])  # refused
    f.audit["w2"].flush()
    assert sent == before
    row = Job.objects.get(pk=f.handle.id)
    assert (row.status, row.attempts, row.worker_id, row.last_error) == (
        JobStatus.CANCELLED, 2, "w2", "second")
    assert [(a.number, a.error, a.worker_id) for a in JobAttempt.objects.filter(
        job_id=f.handle.id).order_by("id")] == [(1, "first", "w1"), (2, "second", "w2")]


def test_an_expired_second_delivery_leaves_the_job_to_the_run_that_settled_it(  # type: ignore[no-untyped-def]
        cfg) -> None:
    """The second delivery (attempt 2, the reused token) came after the job's expiry and was
    never run: its ``expired`` ack, refused (the first run's late success took its lease),
    is no outcome of a run and records nothing. The first run's success lands: the row
    ends ``succeeded`` with its result, not ``expired``."""
    handle = schedule("tests.jobs_chaos.record")
    engine, settings = get_engine(), get_settings()
    replica = snapshot()
    audit = {name: AuditWriter() for name in ("w1", "w2")}
    settler = {name: Settler(engine, settings, audit[name], name) for name in ("w1", "w2")}
    for name in ("w1", "w2"):
        audit[name].after_write = settler[name].landed
    [first] = payloads.read(engine.claim("default", 10, 60_000).jobs, claimed=True).run
    assert settler["w1"].started(first)
    audit["w1"].flush()
    fail_over_to(replica)
    [second] = payloads.read(engine.claim("default", 10, 60_000).jobs, claimed=True).run
    assert (second.token, second.attempt) == (1, 2)
    ok = success(first)
    ok.result = {"answer": 42}
    settler["w1"].settle([ok])  # accepted; its row write not flushed yet
    settler["w2"].settle([expired(second, "tests.jobs_chaos.record", 0)])  # refused
    audit["w2"].flush()
    audit["w1"].flush()
    row = Job.objects.get(pk=handle.id)
    assert (row.status, row.attempts, row.worker_id, row.result) == (
        JobStatus.SUCCEEDED, 1, "w1", {"answer": 42})
