"""The events of a sharded queue are written on its shards' nodes, one stream per shard,
and the readers (``delayq_status --follow``) merge every stream by entry id."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_delayq import schedule
from django_delayq.core import events
from django_delayq.core.connection import get_engine
from django_delayq.testing import run_due_jobs
from tests.cluster.test_node_loss import NAMES, sharded  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_a_sharded_queues_events_go_to_its_shards_streams_and_read_merged(  # type: ignore[no-untyped-def]
        sharded, redis_cluster) -> None:  # noqa: F811
    engine = get_engine()
    handles = [schedule("tests.jobs.noop", queue="emails") for _ in range(30)]
    assert run_due_jobs(["emails"]) == 30
    events.flush()
    streams = {name: engine.keys(name).events for name in NAMES}
    nodes = {redis_cluster.node_of(key) for key in streams.values()}
    assert len(nodes) == len(NAMES)  # three streams on three nodes
    held = {name: engine.client.xlen(key) for name, key in streams.items()}
    assert min(held.values()) > 0, held
    assert not engine.client.exists(engine.global_keys.events)  # nothing on the prefix's
    for name, key in streams.items():  # each event is on its job's home shard
        jobs = {_text(fields[b"job"]) for _id, fields in engine.client.xrange(key)}
        assert {engine.home_of("emails", job) for job in jobs} == {name}
    merged = engine.read_events(dict.fromkeys(engine.event_streams(), "0-0"), block_ms=100,
                                count=1000)
    assert len(merged) == sum(held.values())
    assert sum(_text(f[b"event"]) == "succeeded" for _, _, f in merged) == 30
    ids = [_text(entry_id) for _, entry_id, _ in merged]
    assert ids == sorted(ids, key=lambda i: tuple(int(p) for p in i.split("-")))
    assert {_text(f[b"job"]) for _, _, f in merged} == {h.id for h in handles}
    assert all(engine.client.xrange(key, entry_id, entry_id)  # named with its stream
               for key, entry_id, _ in merged)
    out = StringIO()
    call_command("delayq_status", "--follow", "--json", "--last", "60", "--count", "60",
                 stdout=out)
    seen = [json.loads(line) for line in out.getvalue().splitlines()]
    assert sum(e["event"] == "succeeded" for e in seen) == 30
