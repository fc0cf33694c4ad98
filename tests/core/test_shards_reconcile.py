"""The reconciler on a sharded queue: a row whose job one shard lost is re-enqueued into
its home shard; a job that sits in another shard (enqueued under another shard count)
is found there and not enqueued a second time."""

from __future__ import annotations

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine, reset
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine.engine import Engine as OneDataSet
from django_delayq.engine.shard_map import shard_index, shard_name

pytestmark = pytest.mark.django_db(transaction=True)
QUEUES = ("default", "emails", "slow")


def _shards(settings, count: int) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "QUEUE_OPTIONS": {"emails": {"shards": count}}}
    reset()


def _held(index: int) -> set[str]:
    k = get_engine().keys(shard_name("emails", index))
    raw = get_engine().client.zrange(k.pending, 0, -1)
    return {v.decode() if isinstance(v, bytes) else v for v in raw}


def test_a_lost_shard_is_refilled_into_the_home_shards(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    _shards(delayq_settings, 3)
    handles = [schedule("tests.jobs.noop", i, queue="emails", delay=3600) for i in range(30)]
    by_shard = [{h.id for h in handles if shard_index(h.id, 3) == i} for i in range(3)]
    assert [_held(i) for i in range(3)] == by_shard
    OneDataSet.purge(get_engine(), shard_name("emails", 1))  # one node restarts empty
    assert _held(1) == set()
    Reconciler(get_engine(), get_settings(), QUEUES).run_all(assume_lost=True)
    assert [_held(i) for i in range(3)] == by_shard
    assert get_engine().stats("emails").scheduled == 30


def test_jobs_of_an_earlier_shard_count_are_found_not_doubled(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    _shards(delayq_settings, 1)
    handles = [schedule("tests.jobs.noop", i, queue="emails", delay=3600) for i in range(30)]
    _shards(delayq_settings, 3)  # the count grows: every job still sits in shard 0
    Reconciler(get_engine(), get_settings(), QUEUES).run_all(assume_lost=True)
    assert _held(0) == {h.id for h in handles} and _held(1) == _held(2) == set()
    assert get_engine().stats("emails").scheduled == 30
