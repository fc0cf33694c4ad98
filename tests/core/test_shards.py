"""A sharded queue through Django: ``DELAYQ["QUEUE_OPTIONS"][q]["shards"]`` checked and
parsed, ``schedule()`` spreading the jobs over the shards, cancel finding a job's shard,
and a real ``delayq_worker`` process running every job of every shard once."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import Popen

import pytest

from django_delayq import schedule
from django_delayq.core import conf
from django_delayq.core.connection import get_engine
from django_delayq.engine.engine import CancelOutcome
from django_delayq.engine.engine import Engine as OneDataSet
from django_delayq.engine.shard_map import shard_name
from django_delayq.models import Job, JobStatus
from django_delayq.observe import checks
from tests.core.test_shards_settings import SHARDS
from tests.helpers import wait_until
from tests.worker.conftest import worker_starter

SHARDED = {"emails": {"shards": SHARDS}}


def _problems(settings, options) -> list[str]:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {"QUEUES": ["default", "emails", "emails#1"],
                       "ALLOWED_CALLABLES": ["tests.jobs"], "QUEUE_OPTIONS": options}
    return [msg for name, msg in conf.problems() if name == "QUEUE_OPTIONS"]


@pytest.mark.parametrize("count", [0, -1, 65, 2.5, True, "3"])
def test_a_bad_shard_count_is_refused_naming_it(settings, count) -> None:  # type: ignore[no-untyped-def]
    [msg] = _problems(settings, {"default": {"shards": count}})
    assert "['default']['shards'] must be an integer from 1 to 64, not %r" % (count,) in msg


def test_a_sharded_queue_takes_no_queue_limit(settings) -> None:  # type: ignore[no-untyped-def]
    [msg] = _problems(settings, {"default": {"shards": 2, "concurrency": 5}})
    assert "a sharded queue takes no rate_limit or concurrency" in msg


def test_shard_names_may_not_be_another_queues_name(settings) -> None:  # type: ignore[no-untyped-def]
    [msg] = _problems(settings, {"emails": {"shards": 2}})
    assert "would share keys with queue 'emails#1'" in msg
    errors = checks.check_settings()  # a queue named like a shard is refused itself (E005)
    assert [e.id for e in errors] == ["delayq.E005", "delayq.E028"]
    assert "not queue names: 'emails#1'" in errors[0].msg


def test_the_shard_counts_reach_the_engine(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {"QUEUES": ["default", "emails"], "ALLOWED_CALLABLES": ["tests.jobs"],
                       "QUEUE_OPTIONS": {"emails": {"shards": 3, "timeout": 5},
                                         "default": {"shards": 1}}}
    s = conf.get_settings()
    assert s.queue_shards == {"emails": 3}
    assert s.timeout_for("emails", None) == 5
    assert get_engine().shard_map.count("emails") == 3


@pytest.fixture
def sharded(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "QUEUE_OPTIONS": SHARDED}
    return delayq_settings


@pytest.fixture
def start_sharded_worker(sharded, tmp_path) -> Iterator[Callable[..., Popen[str]]]:  # type: ignore[no-untyped-def]
    yield from worker_starter(sharded, tmp_path, "tests.core.test_shards_settings")


def _runs(path: Path) -> list[str]:
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_schedule_onto_a_sharded_queue_and_a_worker_runs_every_job_once(
        start_sharded_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "runs.txt"
    handles = [schedule("tests.jobs.record", str(out), "j%d" % i, queue="emails",
                        delay=0 if i % 2 else 1) for i in range(60)]
    engine = get_engine()
    per_shard = [OneDataSet.stats(engine, shard_name("emails", i)) for i in range(SHARDS)]
    assert all(s.ready + s.scheduled > 0 for s in per_shard)  # spread over every shard
    assert sum(s.ready + s.scheduled for s in per_shard) == 60
    assert handles[0].cancel() == CancelOutcome.CANCELLED  # found in its shard
    proc = start_sharded_worker("--concurrency", "4")
    wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 59,
               timeout=120)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert sorted(_runs(out)) == sorted("j%d" % i for i in range(1, 60))  # each once
    assert handles[0].status == JobStatus.CANCELLED
    stats = engine.stats("emails")
    assert (stats.ready, stats.scheduled, stats.inflight) == (0, 0, 0)


@pytest.mark.django_db(transaction=True)
def test_the_testing_helpers_run_the_jobs_of_every_shard(sharded) -> None:  # type: ignore[no-untyped-def]
    from django_delayq.testing import run_due_jobs

    handles = [schedule("tests.jobs.add", i, 1, queue="emails") for i in range(12)]
    assert run_due_jobs(["emails"]) == 12
    assert sorted(h.job.result for h in handles) == list(range(1, 13))


def _one_shard_loses_its_data(engine, name: str) -> int:  # type: ignore[no-untyped-def]
    """What a cluster node that holds one shard's slot and restarts empty leaves."""
    gone = list(engine.client.scan_iter(match=engine.keys(name).tag + "*"))
    return engine.client.delete(*gone) if gone else 0


@pytest.mark.django_db(transaction=True)
def test_a_shard_that_loses_its_data_alone_is_a_loss_of_the_queue(sharded) -> None:  # type: ignore[no-untyped-def]
    """Each shard has its own epoch: the loss of the last shard's data (its node restarted
    empty) starts the loss pass, which puts back exactly the jobs that shard held."""
    from datetime import timedelta

    from django_delayq.core.reconcile import Reconciler

    handles = [schedule("tests.jobs.noop", queue="emails", delay=3600) for _ in range(30)]
    Job.objects.update(updated_at=handles[0].job.updated_at - timedelta(hours=1))
    engine = get_engine()
    s = conf.get_settings()
    reconciler = Reconciler(engine, s, s.queues)
    reconciler.tick()  # the first look: epochs made by enqueue, no loss, no suspect
    assert engine.stats("emails").scheduled == 30
    # Shard 0's jobs ran and were acked; their audit flush has not landed (rows scheduled).
    first = shard_name("emails", 0)
    later = engine.time_ms() + 3_700_000  # when they were due
    claimed = OneDataSet.claim(engine, first, 100, 60_000, now_ms=later).jobs
    assert claimed and all(OneDataSet.ack(engine, first, [(j.id, j.token)]) for j in claimed)
    last = shard_name("emails", SHARDS - 1)
    held = OneDataSet.stats(engine, last).scheduled
    assert held > 0 and _one_shard_loses_its_data(engine, last) > 0
    assert engine.stats("emails").scheduled == 30 - held - len(claimed)
    reconciler._last_epoch = -1e18  # the next tick looks at the epochs again
    assert reconciler.tick() == held  # the loss pass, without grace, of the lost shard only
    assert OneDataSet.stats(engine, last).scheduled == held
    assert engine.stats("emails").scheduled == 30 - len(claimed)  # none doubled, none re-run
    assert all(engine.inspect("emails", j.id).place == "" for j in claimed)
    assert reconciler.check_epochs() == []


@pytest.mark.django_db(transaction=True)
def test_a_shard_without_jobs_is_not_a_loss_on_the_first_look(sharded) -> None:  # type: ignore[no-untyped-def]
    """One job: the other shards have no epoch and hold nothing, as new shards do."""
    from django_delayq.core.reconcile import Reconciler

    schedule("tests.jobs.noop", queue="emails", delay=3600)
    engine = get_engine()
    s = conf.get_settings()
    assert sum(engine.client.exists(engine.keys(shard_name("emails", i)).epoch)
               for i in range(SHARDS)) == 1
    assert "emails" not in Reconciler(engine, s, s.queues).check_epochs()
    assert engine.stats("emails").scheduled == 1
