"""One reading of the callable limits (``observe.limits``) behind both the admin's queues
page and ``delayq_status``: the same numbers, each surface only formats them."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_delayq.core.conf import get_settings
from django_delayq.observe.redis_state import CallableLimitState, callable_limits, describe_limit


@pytest.mark.django_db
def test_both_surfaces_show_the_one_reading(delayq_engine, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "CALLABLE_LIMITS": {
        "tests.jobs.add": {"rate_limit": "10/s", "concurrency": 2},
        "tests.jobs.noop": {"concurrency": 1}}}
    assert delayq_engine.acquire("tests.jobs.add", "01a", lease_ms=60_000, rate=(10, 1000),
                                 concurrency=2).granted
    s = get_settings()
    assert callable_limits(delayq_engine, s) == [
        CallableLimitState(callable="tests.jobs.add", rate=(10, 1000), concurrency=2,
                           running=1, started_in_window=1),
        CallableLimitState(callable="tests.jobs.noop", rate=None, concurrency=1, running=0,
                           started_in_window=0)]
    page = callable_limits(delayq_engine, s)  # the admin's queues page shows c.limit
    # delayq_status --json shows the reading as it is, its rate a list
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    shown = json.loads(out.getvalue())["callable_limits"]
    assert [(c.callable, c.limit, c.running, c.started_in_window) for c in page] == [
        ("tests.jobs.add", "10/s, 2 at once", 1, 1), ("tests.jobs.noop", "1 at once", 0, 0)]
    assert [(c["callable"], c["rate"], c["concurrency"], c["running"]) for c in shown] == [
        ("tests.jobs.add", [10, 1000], 2, 1), ("tests.jobs.noop", None, 1, 0)]
    assert (describe_limit(None, None), describe_limit(None, None, none="none")) == ("", "none")
