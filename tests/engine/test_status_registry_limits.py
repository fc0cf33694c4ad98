"""The workers registry is read within limits: a Redis writer that floods it (ids of
100,000 characters, huge info entries, info entries without a heartbeat) made every read
slow and ``delayq_status`` print 20 MB. Such ids are skipped, an oversized info entry is
not read but reported with its size, and the infos of one read stay under a total."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_delayq.engine import server as registry

pytestmark = pytest.mark.django_db(transaction=True)

INFO = json.dumps({"host": "h", "pid": 1, "queues": ["default"], "running": 0,
                   "processed": 3, "processes": 1, "jobs": []})


def _status(*args: str) -> str:
    out = StringIO()
    call_command("delayq_status", *args, stdout=out)
    return out.getvalue()


def test_a_flooded_registry_is_read_and_shown_within_limits(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    client, keys = delayq_engine.client, delayq_engine.global_keys
    delayq_engine.register_worker("real:1:abc", INFO)
    now_ms = delayq_engine.time_ms()
    junk = {"j%03d" % i + "x" * 100_000: now_ms + i for i in range(200)}
    client.zadd(keys.workers, junk)
    client.hset(keys.workers_info, mapping=dict.fromkeys(junk, INFO))
    client.hset(keys.workers_info, mapping={"ghost%d" % i: "y" * 100_000 for i in range(50)})
    client.zadd(keys.workers, {"bigw": now_ms + 500})
    client.hset(keys.workers_info, "bigw", "z" * 100_000)
    found = delayq_engine.workers()
    assert [w.id for w in found] == ["real:1:abc", "bigw"]
    assert (found[0].info, found[0].info_bytes_unread) == (INFO, 0)
    assert (found[1].info, found[1].info_bytes_unread) == (None, 100_000)
    doc = _status("--json")
    assert len(doc) < 50_000
    shown = {w["id"]: w for w in json.loads(doc)["workers"]}
    assert shown["bigw"]["info_error"] == ("100000 bytes, over the registry's read limit: "
                                           "not read")
    assert shown["real:1:abc"]["info"]["processed"] == 3
    text = _status()
    assert len(text) < 20_000 and "info malformed (100000 bytes" in text


def test_the_infos_of_one_read_stay_under_the_total(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    client, keys = delayq_engine.client, delayq_engine.global_keys
    size = 60_000
    now_ms = delayq_engine.time_ms()
    client.zadd(keys.workers, {"w%02d" % i: now_ms + i for i in range(80)})
    client.hset(keys.workers_info, mapping={"w%02d" % i: "i" * size for i in range(80)})
    found = delayq_engine.workers()
    read = [w.id for w in found if w.info is not None]
    fits = registry.MAX_INFO_TOTAL_BYTES // size
    assert len(found) == 80 and read == ["w%02d" % i for i in range(80 - fits, 80)]
    assert {w.info_bytes_unread for w in found if w.info is None} == {size}
    assert len(delayq_engine.workers(limit=5)) == 5
