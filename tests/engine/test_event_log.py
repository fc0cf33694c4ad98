"""``EventLog.append`` encodes its ``events_add`` calls itself on a plain client and
writes several before reading their replies: the events land as written, in order (text
outside ASCII too), and calls that meet a Redis that lost its scripts are made again by
the script's usual call, each event written once."""

from __future__ import annotations

import redis

from django_delayq.engine.event_log import EventLog
from django_delayq.engine.resp import bulk, command


def _event(i: int) -> dict[str, str]:
    return {"event": "succeeded", "job": "j%d" % i, "queue": "default",
            "callable": "app.tasks.é", "ts_ms": str(1_767_225_600_000 + i), "attempt": "1",
            "error": "☃ %d" % i}


def test_the_encoded_command_is_the_protocol_of_its_parts() -> None:
    parts = ("EVALSHA", "abc", 1, "{p}:events", 10_000, 2, "event", "é☃", "event", "x")
    raw = [str(p).encode() for p in parts]
    expected = b"*%d\r\n" % len(raw) + b"".join(b"$%d\r\n%s\r\n" % (len(r), r) for r in raw)
    assert command(*parts, seen={}) == command(*parts) == expected
    seen: dict[str | int, bytes] = {}
    assert b"*%d\r\n" % len(raw) + bulk(parts[:5], seen) + bulk(parts[5:], seen) == expected
    assert seen["event"] == b"$5\r\nevent\r\n" and len(seen) == len(set(parts))
    assert command(*parts[:3], count=len(parts)) + bulk(parts[3:]) == expected


def test_events_land_in_order_and_after_a_script_flush_once_each(redis_server) -> None:
    client = redis.Redis.from_url(redis_server.url)
    key = "{tlog}:events"
    log = EventLog(client, key, 1000)
    try:
        batch = [_event(i) for i in range(60)]  # three calls of at most 25 events
        assert sum(written for _, _, written in log.append(batch)) == 60
        client.script_flush()  # a restarted Redis: the calls written together meet NOSCRIPT
        assert [covered for covered, _, _ in log.append(
            [_event(i) for i in range(60, 120)])] == [25, 25, 10]  # in order, once each
        found = [{k.decode(): v.decode() for k, v in f.items()}
                 for _, f in client.xrange(key)]
        assert found == [_event(i) for i in range(120)]
    finally:
        client.delete(key)
