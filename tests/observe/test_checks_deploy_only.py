"""A Redis without persistence is reported by ``check --deploy``, not by every command."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from tests.helpers import point_at
from tests.redis_server import RedisServer, binaries


@pytest.fixture
def bare_redis():  # type: ignore[no-untyped-def]
    server = RedisServer(binaries()[0], extra=["--save", "", "--appendonly", "no"]).start()
    yield server
    server.cleanup()


def _check(*args: str) -> str:
    out, err = StringIO(), StringIO()
    call_command("check", *args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


@pytest.mark.django_db  # `check` runs the model checks, which may ask the database
def test_no_persistence_is_said_by_check_deploy_only(settings, bare_redis) -> None:  # type: ignore[no-untyped-def]
    point_at(settings, bare_redis)
    assert "delayq.I010" not in _check()
    assert "delayq.I010" in _check("--deploy")
