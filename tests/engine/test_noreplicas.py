"""A master that refuses writes for a while (``min-replicas-to-write`` with no replica in
sync: NOREPLICAS, as during a Sentinel failover) is an outage of the event stream, not a
damaged stream: the events are kept for the retry, never dropped."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from django_delayq.core.events import EventStream, stream_key
from tests.conftest import unique_prefix
from tests.redis_server import RedisServer, binaries


@pytest.fixture
def lonely_master() -> Iterator[RedisServer]:
    """A server that wants a replica in sync for every write, and has none."""
    server = RedisServer(binaries()[0], extra=["--min-replicas-to-write", "1"]).start()
    yield server
    server.cleanup()


def test_noreplicas_keeps_the_events_for_the_retry(lonely_master,  # type: ignore[no-untyped-def]
                                                   caplog) -> None:
    client = lonely_master.client()
    key = stream_key(unique_prefix())
    stream = EventStream(client, key, maxlen=1000)
    for i in range(2):
        stream.add({"event": "succeeded", "job": "j%d" % i, "queue": "q", "ts_ms": "1"})
    try:
        with caplog.at_level(logging.WARNING, logger="django_delayq.core.events"):
            assert stream.flush() == 0
        assert "NOREPLICAS" in caplog.text and "kept for a retry" in caplog.text
        assert "damaged" not in caplog.text
        assert (stream.pending(), stream.dropped) == (2, 0)
        client.config_set("min-replicas-to-write", "0")  # the new master answers
        assert stream.flush() == 2
        assert client.xlen(key) == 2 and stream.dropped == 0
    finally:
        stream.close()
        client.close()
