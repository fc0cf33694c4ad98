"""A failover to a lagging replica hands a lease token out a second time: the new master
never saw the claim the old one answered after replication stopped, so it counts one
delivery fewer and its next claim of the job gives the same token (the row, which the
first run's start reached, makes it attempt 2). The first delivery's ack, sent late (Redis
was down when its run ended), is then accepted on the new master: it settles the second
delivery's lease, and its record (attempt 1) is dropped by the audit's guard (the row says
attempt 2). The second run's ack is refused: it must not take the settled record of a
lower attempt for another delivery's, or its row stays ``running`` for as long as its
worker lives while Redis holds the job nowhere (the reconciler leaves a live worker's
rows to it)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from django_delayq import schedule
from django_delayq.core import payloads
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job, JobStatus
from django_delayq.worker.audit import AuditWriter
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


@pytest.mark.parametrize("second_worker", ["w1", "w2"], ids=["same-worker", "other-worker"])
def test_a_run_whose_lease_a_stale_ack_took_after_a_failover_ends_its_row(  # type: ignore[no-untyped-def]
        cfg, caplog, second_worker) -> None:
    h = schedule("tests.jobs_chaos.record")
    engine, settings = get_engine(), get_settings()
    replica = snapshot()
    audit = {name: AuditWriter() for name in ("w1", "w2")}
    settler = {name: Settler(engine, settings, audit[name], name) for name in ("w1", "w2")}
    [first] = payloads.read(engine.claim("default", 10, 60_000).jobs, claimed=True).run
    assert settler["w1"].started(first)  # its run starts; the row says so
    audit["w1"].flush()
    fail_over_to(replica)  # the claim and the start mark were never replicated
    [second] = payloads.read(engine.claim("default", 10, 60_000).jobs, claimed=True).run
    assert (first.token, first.attempt, second.token, second.attempt) == (1, 1, 1, 2)
    assert settler[second_worker].started(second)
    audit[second_worker].flush()
    settler["w1"].settle([success(first)])  # sent again once Redis answers: accepted
    audit["w1"].flush()
    assert engine.inspect("default", h.id).place == ""  # the second delivery's lease went
    with caplog.at_level(logging.WARNING, logger="django_delayq.worker.settle"):
        settler[second_worker].settle([success(second)])  # refused: no longer in flight
    audit[second_worker].flush()
    for name in ("w1", "w2"):  # both alive: the reconciler leaves their rows to them
        engine.register_worker(name, "{}")
    Reconciler(engine, settings, ("default",)).run_all(grace_seconds=0)
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.attempts, row.worker_id) == (
        JobStatus.SUCCEEDED, 2, second_worker), caplog.text
    assert "lease lost before it was settled" not in caplog.text
