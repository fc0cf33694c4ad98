"""A pause is durable and reads tell the truth (docs/guarantees.md, "Pause"): the
``QueuePause`` row is written first, the reconciler writes the pause back to Redis after
a queue or one shard lost its data, before that queue's jobs are put back; a sharded
queue paused on some shards only reads as partly paused everywhere status is shown; a
pause that reached some shards only names them and running it again completes it."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_delayq import compat, pause_queue, paused_queues, resume_queue, schedule
from django_delayq.core import pauses
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine, reset
from django_delayq.core.queues import pause_group, paused_groups
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine.engine import Engine as OneDataSet
from django_delayq.engine.shard_health import PartialControl
from django_delayq.engine.shard_map import shard_name
from django_delayq.models import Job, QueuePause
from django_delayq.observe import redis_state
from django_delayq.testing import run_worker
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
QUEUES = ("default", "emails", "slow")
NAMES = tuple(shard_name("emails", i) for i in range(3))


@pytest.fixture
def sharded(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "QUEUE_OPTIONS": {"emails": {"shards": len(NAMES)}}}
    reset()
    return delayq_settings


def _flags() -> list[bool]:
    """Each shard's own pause flag (what claim.lua reads)."""
    return [bool(OneDataSet.paused(get_engine(), [name])) for name in NAMES]


def test_a_pause_one_shard_lost_is_written_back_before_its_jobs_return(sharded) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    assert pause_queue("emails")
    for i in range(30):
        schedule("tests.jobs.noop", i, queue="emails")
    reconciler = Reconciler(engine, get_settings(), QUEUES)
    reconciler.tick()  # the epochs as they are: no loss
    OneDataSet.purge(engine, NAMES[2])  # its node restarts empty: its jobs and pause gone
    assert _flags() == [True, True, False]
    # the worker's reconciler: the loss pass puts the lost shard's jobs back
    wait_until(lambda: reconciler.tick() >= 0 and engine.stats("emails").ready == 30)
    assert _flags() == [True, True, True]
    assert engine.claim("emails", 100, 30_000).jobs == []  # none runs: still paused
    assert paused_queues() == ["emails"]


def test_an_unsharded_queue_and_a_group_get_their_pause_back(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    pause_queue("emails")
    pause_group("default", "tenant-1")
    schedule("tests.jobs.noop", queue="emails")
    for queue in ("emails", "default"):
        OneDataSet.purge(engine, queue)  # FLUSHALL, a restart without persistence
    assert paused_queues() == [] and paused_groups("default") == []
    assert Reconciler(engine, get_settings(), QUEUES).run_all(assume_lost=True) == 1
    assert paused_queues() == ["emails"] and paused_groups("default") == ["tenant-1"]
    assert engine.claim("emails", 10, 30_000).jobs == []
    assert resume_queue("emails") and not QueuePause.objects.filter(group="").exists()
    Reconciler(engine, get_settings(), QUEUES).run_all()
    assert paused_queues() == []  # a resume is not undone


def test_a_queue_paused_on_some_shards_reads_as_partly_paused(sharded, settings) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    for name in NAMES[:2]:  # a pause that reached shards 0 and 1, not 2
        OneDataSet.pause(engine, name)
    QueuePause.objects.create(queue="emails")  # what the operator asked for
    assert paused_queues() == []  # shard 2 is claimed from
    row = next(q for q in redis_state.queues(engine, ["emails"]))
    assert (row.paused, row.paused_shards, row.shards) == (False, 2, 3)
    assert row.pause_text == "partly paused: 2 of 3 shards; paused in the database"
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    doc = json.loads(out.getvalue())
    emails = next(q for q in doc["queues"] if q["queue"] == "emails")
    assert doc["paused"] == [] and doc["partly_paused"] == ["emails"]
    assert (emails["paused"], emails["paused_shards"], emails["shards"], emails["pause_kept"]
            ) == (False, 2, 3, True)
    out = StringIO()
    call_command("delayq_status", stdout=out)
    assert "PAUSED: emails (partly paused: 2 of 3 shards; paused in the database)" in (
        out.getvalue())
    out = StringIO()
    call_command("delayq_queue", "list", "emails", stdout=out)
    assert "partly paused: 2 of 3 shards" in out.getvalue()
    if compat.prometheus_client is not None:
        from django_delayq.observe import prometheus

        sample = prometheus.REGISTRY.get_sample_value
        assert sample("delayq_queue_paused", {"queue": "emails"}) == 0
        assert sample("delayq_queue_paused_shards", {"queue": "emails"}) == 2


def test_a_pause_that_reaches_some_shards_names_them_and_is_completed(sharded) -> None:  # type: ignore[no-untyped-def]
    engine = get_engine()
    engine.health.clock = lambda: 0.0  # a shard set aside stays aside until it works
    engine.health.failed(NAMES[2], ConnectionError("node down"))  # set aside: it failed
    with pytest.raises(PartialControl, match=r"^pause of queue 'emails' reached 2 of 3 "
                       r"shards \(emails#0, emails#1\), not emails#2 \(.*node down.*\): run "
                       r"it again to complete it$"):
        pause_queue("emails")
    assert _flags() == [True, True, False] and QueuePause.objects.filter(queue="emails")
    with pytest.raises(CommandError, match=r"reached 2 of 3 shards .* not emails#2"):
        call_command("delayq_queue", "pause", "emails", stdout=StringIO())
    engine.health.worked(NAMES[2])  # its node answers again
    Reconciler(engine, get_settings(), QUEUES).run_all()  # the rows' pause completed
    assert _flags() == [True, True, True] and paused_queues() == ["emails"]
    engine.health.failed(NAMES[0], ConnectionError("node down"))
    with pytest.raises(PartialControl, match=r"^resume of queue 'emails' reached 2 of 3 "
                       r"shards \(emails#1, emails#2\), not emails#0"):
        resume_queue("emails")
    engine.health.worked(NAMES[0])
    assert resume_queue("emails")  # again: completed
    assert _flags() == [False, False, False] and not QueuePause.objects.exists()


def test_a_worker_writes_the_rows_pauses_before_its_first_claim(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """A Redis that lost the pause while no worker ran: the first worker to start pauses
    the queue again before its first claim, not at its reconciler's first pass."""
    QueuePause.objects.create(queue="emails")  # paused, then Redis lost it
    job = schedule("tests.jobs.noop", queue="emails")
    assert paused_queues() == []
    assert run_worker(["emails"]) == 0
    assert paused_queues() == ["emails"] and Job.objects.get(pk=job.id).status == "scheduled"


def test_a_resume_between_the_write_back_s_read_and_its_write_is_not_undone(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    class ResumedMeanwhile(type(get_engine())):  # type: ignore[misc]
        """The real engine; an operator's resume lands after the rows were read."""

        def pause(self, queue):  # type: ignore[no-untyped-def]
            resume_queue(queue)  # the row deleted, then Redis resumed
            return super().pause(queue)

    assert pause_queue("emails")
    get_engine().resume("emails")  # Redis lost the pause: the write-back will write it
    engine = get_engine()
    engine.__class__ = ResumedMeanwhile
    try:
        assert pauses.restore(engine, QUEUES) == set()
    finally:
        engine.__class__ = ResumedMeanwhile.__mro__[1]
    assert not QueuePause.objects.exists()
    assert paused_queues() == []  # the resume stands: no pause without its row
