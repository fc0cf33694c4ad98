"""``observe.redis_state``: the queues and the workers as Redis holds them, read once for
the admin's queues page and dashboard, ``delayq_status`` and the metrics, as one row type
each; each renders its own output (their tests: tests/admin/, tests/management/,
tests/observe/test_metrics.py)."""

from __future__ import annotations

import json

import pytest

from django_delayq.engine.outcomes import QueueLimit
from django_delayq.observe import redis_state

INFO = {"host": "h", "processes": 2, "running": 1, "waiting": 0,
        "jobs": [{"id": "j1", "queue": 5, "started_ms": 0}, "junk", {"id": 7}]}


@pytest.mark.django_db  # the database's pauses: shown next to Redis's
def test_the_queues_with_their_counts_paused_state_and_limit(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    delayq_engine.pause("emails")
    delayq_engine.set_queue_limit("emails", rate=(10, 1000), concurrency=3)
    default, emails = redis_state.queues(delayq_engine, ["default", "emails"])
    assert (default.queue, default.paused, default.limit) == ("default", False, None)
    assert (emails.paused, emails.limit) == (True, QueueLimit(rate=(10, 1000), concurrency=3))
    assert emails.scheduled == emails.inflight == emails.ready == 0
    assert (emails.next_due, emails.next_due_ms, emails.oldest_ready_ms) == (None, None, None)
    assert (default.limit_text, emails.limit_text) == ("", "10/s, 3 at once")


def test_the_workers_with_their_figures_jobs_and_what_was_not_read(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    delayq_engine.register_worker("w-ok", json.dumps(INFO))
    delayq_engine.register_worker("w-json", "{not json")
    keys = delayq_engine.global_keys
    delayq_engine.client.zadd(keys.workers, {"w-big": delayq_engine.time_ms()})
    delayq_engine.client.hset(keys.workers_info, "w-big", "x" * 100_000)
    found = {w.id: w for w in redis_state.workers(delayq_engine)}
    ok = found["w-ok"]
    assert (ok.processes, ok.running, ok.prefetched, ok.error) == (2, 1, 0, None)
    assert [(job.id, job.queue, job.callable) for job in ok.jobs] == [("j1", "5", "")]  # as text
    assert ok.jobs[0].age_s is not None and ok.jobs[0].age_s > 0  # started at 0 ms: long ago
    assert (found["w-json"].info, found["w-json"].error) == ({}, "not JSON")
    assert (found["w-big"].info, found["w-big"].jobs, found["w-big"].error) == (
        {}, [], "100000 bytes, over the registry's read limit: not read")
    assert all(w.heartbeat_age_s >= 0 for w in found.values())
