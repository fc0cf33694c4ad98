"""events_add.lua's per-call bound: a burst of the largest events the workers write (every
field, a 500-character error) goes to Redis in calls of at most 25 events, each well under
the 5 ms every script must stay under with a 100,000-job backlog (100 events a call took
5-7 ms in some 20,000-job drains). The bound holds for every caller, not only the event
log's: ``Script`` refuses a call of more events, and the script itself writes no more."""

from __future__ import annotations

import pytest

from django_delayq.engine import scripts
from django_delayq.engine.event_log import calls
from django_delayq.engine.scripts import TooManyArguments


def _largest_event(i: int) -> dict[str, str]:
    return {"event": "retrying", "job": "01J%023d" % i, "queue": "q" * 100,
              "callable": "shop.tasks." + "x" * 200, "ts_ms": "1767225600000",
              "attempt": "3", "worker": "host:4242:abcdef", "running": "7",
              "run_at": "2026-01-01T00:00:00+00:00", "retry_at": "2026-01-01T00:01:00+00:00",
              "due_at": "2026-01-01T00:00:00+00:00", "lateness_ms": "12.5",
              "duration_ms": "480.0", "error_type": "shop.errors.Timeout", "error": "e" * 500}


def test_a_burst_of_the_largest_events_goes_in_calls_of_at_most_25() -> None:
    batch = [_largest_event(i) for i in range(1000)]
    sent = [(len(args), n) for args, _covered, n in calls(10_000, batch)]
    assert sum(n for _, n in sent) == 1000  # none dropped: an event fits a call
    assert max(n for _, n in sent) == 25 == scripts.MAX_EVENTS
    assert max(size for size, _ in sent) <= scripts.MAX_EVENT_ARGS == 800
    assert scripts.BOUNDS["events_add"].max_args == 800
    header = scripts._read("events_add")
    assert "at most 25 events and 800 arguments per call" in header


def _small_events(n: int) -> list[object]:
    """events_add's ARGV for ``n`` one-field events (3 arguments each: far under the
    argument bound, so only a count of the events can refuse them)."""
    return [10_000] + [v for i in range(n) for v in (1, "job", "j%d" % i)]


def test_a_call_of_more_events_than_the_bound_is_refused_whoever_makes_it(
        redis_server) -> None:  # type: ignore[no-untyped-def]
    script = scripts.load("events_add")
    client = redis_server.client()
    key = "{tbound}:events"
    keys = script.keys_of(None, events=key)
    many = _small_events(10 * scripts.MAX_EVENTS)
    assert len(many) < scripts.MAX_EVENT_ARGS  # 751 arguments: the count is what is over
    try:
        with pytest.raises(TooManyArguments, match="at most 25 events"):
            script(client, keys, many)
        assert client.xlen(key) == 0
        script(client, keys, _small_events(scripts.MAX_EVENTS))  # the bound itself: sent
        assert client.xlen(key) == scripts.MAX_EVENTS
        # A caller that bypasses Script (its own EVAL): the script writes the bound, the
        # rest is refused, as its header says ("fewer than sent: the rest was refused").
        client.delete(key)
        assert client.eval(script.source, len(keys), *keys, *many) == scripts.MAX_EVENTS
        assert client.xlen(key) == scripts.MAX_EVENTS
    finally:
        client.delete(key)
        client.close()
