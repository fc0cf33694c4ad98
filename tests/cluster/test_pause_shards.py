"""A paused sharded queue on a real local Redis Cluster (docs/cluster.md, "Sharded
queues"): a shard's node that restarts empty gets its pause back from the database
before the queue's jobs run, and a pause that fails on one shard's node says which
shards it reached, reads as partly paused, and is completed by running it again."""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO
from typing import TYPE_CHECKING

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_delayq import pause_queue, paused_queues, resume_queue, schedule
from django_delayq.core.connection import get_engine
from django_delayq.engine.engine import Engine as OneDataSet
from django_delayq.engine.shard_health import ERRORS
from django_delayq.engine.shard_map import shard_name
from django_delayq.models import Job, JobStatus
from tests.cluster.conftest import running_worker, spread_prefix
from tests.helpers import wait_until

if TYPE_CHECKING:
    from tests.cluster.server import LocalCluster

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]
NAMES = tuple(shard_name("emails", i) for i in range(3))


@pytest.fixture
def sharded(settings, redis_cluster: LocalCluster):  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_cluster.url,
                       "PREFIX": spread_prefix(redis_cluster, NAMES),
                       "QUEUE_OPTIONS": {"emails": {"shards": len(NAMES)}}}
    return settings


def _flag(name: str) -> bool:
    return bool(OneDataSet.paused(get_engine(), [name]))


def _kill(cluster: LocalCluster, port: int) -> None:
    node = cluster.node(port)
    assert node.proc is not None
    node.proc.kill()  # SIGKILL: it comes back empty (no persistence)
    node.proc.wait()
    node.proc = None


def test_a_shard_restarted_empty_gets_its_pause_back_before_jobs_run(  # type: ignore[no-untyped-def]
        sharded, redis_cluster: LocalCluster) -> None:
    engine = get_engine()
    down = redis_cluster.node_of(engine.keys(NAMES[2]).pending)
    with running_worker(("emails",)):
        assert pause_queue("emails")
        schedule("tests.jobs.noop", queue="emails")  # every shard's epoch: a loss is seen
        _kill(redis_cluster, down)
        redis_cluster.restart(down)  # empty: shard 2's pause and epoch are gone
        # the worker's reconciler sees the loss and writes the pause back
        wait_until(lambda: _flag(NAMES[2]), 30)
        handles = [schedule("tests.jobs.noop", i, queue="emails") for i in range(30)]
        wait_until(lambda: engine.stats("emails").ready >= 30, 15)
        assert paused_queues() == ["emails"]
        resumed_at = timezone.now()
        assert resume_queue("emails")
        wait_until(lambda: Job.objects.filter(pk__in=[h.id for h in handles],
                                              status=JobStatus.SUCCEEDED).count() == 30, 30)
    # none ran while the queue read as paused
    assert not Job.objects.filter(pk__in=[h.id for h in handles],
                                  started_at__lt=resumed_at).exists()


def test_a_pause_failing_on_one_shard_names_it_reads_partly_paused_and_completes(  # type: ignore[no-untyped-def]
        sharded, redis_cluster: LocalCluster) -> None:
    engine = get_engine()
    down = redis_cluster.node_of(engine.keys(NAMES[2]).pending)
    assert {redis_cluster.node_of(engine.keys(n).pending) for n in NAMES[:2]}.isdisjoint({down})
    _kill(redis_cluster, down)
    try:
        with pytest.raises(CommandError, match=r"Redis is unavailable: pause of queue 'emails' "
                           r"reached 2 of 3 shards \(emails#0, emails#1\), not emails#2 \("):
            call_command("delayq_queue", "pause", "emails", stdout=StringIO())
        # every shard that answers is paused (paused_queues() would read the other
        # queues too: one of them may live on the node that is down)
        assert engine.paused(["emails"]) == ["emails"]
        assert engine.pause_counts(["emails"]) == {"emails": (2, 2)}
    finally:
        redis_cluster.restart(down)
    wait_until(lambda: _retried(lambda: not _flag(NAMES[2])), 15)
    assert paused_queues() == []  # shard 2 is claimed from: not paused
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    doc = json.loads(out.getvalue())
    assert doc["paused"] == [] and doc["partly_paused"] == ["emails"]
    out = StringIO()
    call_command("delayq_queue", "list", "emails", stdout=out)
    assert "partly paused: 2 of 3 shards; paused in the database" in out.getvalue()
    wait_until(lambda: _retried(lambda: pause_queue("emails") or True), 15)  # again
    assert [_flag(n) for n in NAMES] == [True, True, True]
    assert paused_queues() == ["emails"]


def _retried(check: Callable[[], bool]) -> bool:
    """``check()``, False while the restarted node's shard is still set aside."""
    try:
        return check()
    except ERRORS:
        return False
