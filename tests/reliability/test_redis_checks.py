"""The system check that warns about Redis settings that can lose queue keys."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from django_delayq.observe.checks import check_redis
from tests.helpers import point_at
from tests.redis_server import RedisServer, binaries


def ids(settings, server: RedisServer) -> list[str]:  # type: ignore[no-untyped-def]
    point_at(settings, server)
    return [m.id for m in check_redis()]


@pytest.mark.parametrize("policy,warned", [
    ("allkeys-lru", True), ("allkeys-lfu", True), ("allkeys-random", True),
    ("noeviction", False), ("volatile-lru", False), ("volatile-ttl", False),
])
def test_eviction_policy_that_can_evict_queue_keys_warns(settings, volatile_server, policy,  # type: ignore[no-untyped-def]
                                                         warned) -> None:
    volatile_server.client().config_set("maxmemory-policy", policy)
    assert ("delayq.W010" in ids(settings, volatile_server)) is warned


def test_no_persistence_is_reported_as_info(settings, volatile_server, fault_server) -> None:  # type: ignore[no-untyped-def]
    assert ids(settings, volatile_server) == ["delayq.I010"]  # --save "" --appendonly no
    assert ids(settings, fault_server) == []  # appendonly yes
    rdb = RedisServer(binaries()[0], extra=["--save", "60 1"]).start()
    try:
        assert ids(settings, rdb) == []
    finally:
        rdb.cleanup()


@pytest.mark.django_db  # `check` runs the model checks, which may ask the database
def test_unreachable_redis_warns_and_check_command_still_passes(settings, volatile_server) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, volatile_server)
    volatile_server.stop()
    assert [m.id for m in check_redis()] == ["delayq.W011"]
    err = StringIO()
    call_command("check", stdout=StringIO(), stderr=err)  # raises SystemCheckError on errors
    assert "delayq.W011" in err.getvalue()


def test_eager_mode_does_not_touch_redis(settings, volatile_server) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, volatile_server, EAGER=True)
    volatile_server.stop()
    assert check_redis() == []
