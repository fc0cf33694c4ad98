"""A job's group in Redis: ``{P:Q}:group`` holds it from enqueue (or the reconciler's
re-enqueue) until the job is forgotten, and holds nothing for a job without a group."""

from __future__ import annotations

from django_delayq.engine import Engine, NewJob

NOW = 1_700_000_000_000


def groups(engine: Engine) -> dict[str, str]:
    raw = engine.client.hgetall(engine.keys("q").group)
    return {k.decode(): v.decode() for k, v in raw.items()}


def test_enqueue_stores_the_group_of_grouped_jobs_only(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id="a", at_ms=NOW, group="tenant-42"),
                         NewJob(id="b", at_ms=NOW),
                         NewJob(id="c", at_ms=NOW + 60_000, group="tenant 7 ü")], now_ms=NOW)
    assert groups(engine) == {"a": "tenant-42", "c": "tenant 7 ü"}


def test_a_settled_job_forgets_its_group(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW, group="g") for i in "abc"], now_ms=NOW)
    claimed = engine.claim("q", 2, 60_000, now_ms=NOW).jobs
    engine.ack("q", [(j.id, j.token) for j in claimed], now_ms=NOW)
    assert set(groups(engine)) == {"c"}
    engine.cancel("q", "c")
    assert groups(engine) == {}


def test_a_purged_job_forgets_its_group(engine: Engine) -> None:
    engine.enqueue("q", [NewJob(id=i, at_ms=NOW, group="g") for i in "ab"], now_ms=NOW)
    while engine.purge_pending("q"):
        pass
    assert groups(engine) == {}


def test_the_reconciler_puts_the_group_back(engine: Engine) -> None:
    added = engine.reenqueue("q", [("a", NOW, 0, "g"), ("b", NOW, 3), ("c", NOW)], {},
                             keep_ms=30_000, keep_max=100)
    assert added == 3
    assert groups(engine) == {"a": "g"}
