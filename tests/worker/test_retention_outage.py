"""Retention's rounds while Redis does not answer (a node of the registry down): one
warning line, no traceback, however long it lasts; the rounds go on."""

from __future__ import annotations

import logging

import pytest

from django_delayq.core.conf import get_settings
from django_delayq.engine import Engine
from django_delayq.engine.client import make_client
from django_delayq.worker.retention import Retention
from tests.redis_server import free_port

pytestmark = pytest.mark.django_db


def test_a_redis_outage_logs_no_traceback(delayq_settings, caplog) -> None:  # type: ignore[no-untyped-def]
    down = Engine(make_client("redis://127.0.0.1:%d/0" % free_port()), prefix="gone")
    retention = Retention(down, get_settings(), "w1")
    with caplog.at_level(logging.WARNING, logger="django_delayq.worker.retention"):
        for _ in range(3):
            retention.next_round = 0.0  # its time has come: a round, which fails
            retention.tick()
    records = [r for r in caplog.records if r.name == "django_delayq.worker.retention"]
    assert records and all(r.exc_info is None for r in records), records
    assert records[0].levelno == logging.WARNING
    assert "retention failed" in records[0].getMessage()
