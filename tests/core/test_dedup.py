"""Deduplication and debounce: ``schedule(..., key=k, on_conflict="keep" | "replace" |
"drop")`` (core/workflows.py; docs/workflows.md, "Deduplication and debounce") on a private
Redis, with real workers (in this process and as subprocesses), and the invariant of
docs/internals.md ("Deduplication keys": one live holder per (queue, key)) under
concurrent calls on PostgreSQL."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_delayq import InvalidJob, job, schedule
from django_delayq.core import ids
from django_delayq.core.api import JobSpec, schedule_many
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job, JobKey, JobStatus
from tests import jobs
from tests.helpers import burst, point_at, wait_until
from tests.worker.conftest import worker_starter

pytestmark = pytest.mark.django_db(transaction=True)

ON_POSTGRES = os.environ.get("DELAYQ_TEST_DB") == "postgres"


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    return get_engine()


@pytest.fixture
def start_worker(dq, settings, tmp_path) -> Iterator[Callable[..., Any]]:  # type: ignore[no-untyped-def]
    yield from worker_starter(settings, tmp_path)


def row(handle: Any) -> Job:
    return Job.objects.get(pk=handle if isinstance(handle, str) else handle.id)


def in_redis(engine, job_id: str, queue: str = "default") -> bool:  # type: ignore[no-untyped-def]
    return engine.inspect(queue, job_id).place != ""


def holder(key: str, queue: str = "default") -> str:
    return JobKey.objects.get(queue=queue, key=key).job_id


def tags(path) -> list[str]:  # type: ignore[no-untyped-def]
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


# -- keep: the idempotency key, unchanged ----------------------------------------------

def test_keep_is_the_default_and_the_first_job_stands_even_after_it_finished(dq) -> None:  # type: ignore[no-untyped-def]
    first = schedule(jobs.noop, 1, key="k")
    assert first.id == ids.id_for_key("default", "k")
    assert schedule(jobs.noop, 2, key="k").id == first.id
    burst()
    assert row(first).status == JobStatus.SUCCEEDED
    assert schedule(jobs.noop, 3, key="k", on_conflict="keep").id == first.id
    assert Job.objects.count() == 1 and not JobKey.objects.exists()


def test_the_first_spec_of_a_key_stands_within_one_schedule_many(dq) -> None:  # type: ignore[no-untyped-def]
    """Duplicates of a key in one batch: the row and Redis hold the first spec's job,
    whatever options the later ones have (their rows are written in groups)."""
    made = schedule_many("tests.jobs.noop", [
        JobSpec(args=[0], key="a", kwargs={"x": 0}, group="g2"),
        JobSpec(args=[1], key="k", group="g1"),
        JobSpec(args=[2], key="k", kwargs={"x": 2}, group="g2", delay=86400)])
    assert made[1] == made[2] == ids.id_for_key("default", "k")
    job = row(made[1])
    assert (job.args, job.kwargs, job.group) == ([1], {}, "g1")
    where = dq.inspect("default", job.id)  # due now, as the row says: not in a day
    assert where.place == "ready" or (where.place == "pending"
                                      and where.score_ms < dq.time_ms() + 60_000), where
    assert Job.objects.count() == 2


def test_no_key_adds_no_query(dq) -> None:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as queries:
        schedule(jobs.noop)
    assert len(queries) == 1, [q["sql"] for q in queries]


# -- replace: debounce -----------------------------------------------------------------

def test_replace_cancels_the_pending_job_naming_its_successor(dq) -> None:  # type: ignore[no-untyped-def]
    old = schedule(jobs.noop, 1, key="k", on_conflict="replace", delay=3600)
    new = schedule(jobs.noop, 2, key="k", on_conflict="replace", delay=60)
    assert new.id != old.id and ids.id_for_key("default", "k") not in (old.id, new.id)
    gone = row(old)
    assert (gone.status, gone.last_error) == (JobStatus.CANCELLED, "replaced by %s" % new.id)
    assert gone.finished_at is not None
    kept = row(new)
    assert (kept.status, kept.key, kept.args) == (JobStatus.SCHEDULED, "k", [2])
    assert holder("k") == new.id
    assert not in_redis(dq, old.id) and in_redis(dq, new.id)


def test_the_docs_debounce_example_reindexes_once_after_the_last_edit(dq, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """docs/workflows.md: reindex product 42 once, 10 s after the last of its edits."""
    out = tmp_path / "log"

    def product_saved(product_id: int, edit: str) -> Any:
        return schedule(jobs.record, str(out), edit, key="reindex-product-%d" % product_id,
                        on_conflict="replace", delay=10)

    edits = [product_saved(42, "edit-%d" % i) for i in range(5)]
    other = product_saved(7, "other")
    last = row(edits[-1])
    assert (last.run_at - last.created_at).total_seconds() == 10
    assert [row(h).status for h in edits] == [JobStatus.CANCELLED] * 4 + [JobStatus.SCHEDULED]
    for handle in (edits[-1], other):
        dq.reschedule("default", handle.id, delay_ms=0)  # the 10 s are up
    wait_until(lambda: burst() == 0 and row(edits[-1]).status == JobStatus.SUCCEEDED
               and row(other).status == JobStatus.SUCCEEDED, timeout=60)
    assert sorted(tags(out)) == ["edit-4", "other"]


def test_replace_restarts_the_delay(dq) -> None:  # type: ignore[no-untyped-def]
    old = schedule(jobs.noop, key="k", on_conflict="replace", delay=10)
    new = schedule(jobs.noop, key="k", on_conflict="replace", delay=3600)
    assert (row(new).run_at - row(old).run_at).total_seconds() > 3000


def test_a_worker_runs_only_the_last_of_the_replaced_jobs(dq, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "log"
    handles = [schedule(jobs.record, str(out), tag, key="k", on_conflict="replace")
               for tag in "abcde"]  # all due now, all in Redis before the next replaces them
    wait_until(lambda: burst() == 0 and row(handles[-1]).status == JobStatus.SUCCEEDED,
               timeout=60)
    assert tags(out) == ["e"]
    assert [row(h).status for h in handles[:-1]] == [JobStatus.CANCELLED] * 4
    assert [row(h).last_error for h in handles[:-1]] == [
        "replaced by %s" % h.id for h in handles[1:]]


def test_replace_within_one_transaction_cancels_a_job_not_in_redis_yet(dq, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "log"
    with transaction.atomic():
        a = schedule(jobs.record, str(out), "a", key="k", on_conflict="replace")
        b = schedule(jobs.record, str(out), "b", key="k", on_conflict="replace")
        assert row(a).status == JobStatus.CANCELLED  # the row decides: Redis has neither
    assert not in_redis(dq, a.id)  # the cancel sent after commit follows the enqueue
    wait_until(lambda: burst() == 0 and row(b).status == JobStatus.SUCCEEDED, timeout=60)
    assert tags(out) == ["b"]


def test_a_rolled_back_replace_leaves_the_holder_and_the_reconciler_restores_it(dq) -> None:  # type: ignore[no-untyped-def]
    old = schedule(jobs.noop, key="k", on_conflict="replace", delay=3600)
    with pytest.raises(RuntimeError), transaction.atomic():
        schedule(jobs.noop, key="k", on_conflict="replace")
        raise RuntimeError("rollback")
    assert (row(old).status, holder("k"), Job.objects.count()) == (JobStatus.SCHEDULED,
                                                                   old.id, 1)
    assert not in_redis(dq, old.id)  # Redis's cancel came first: the row is the record
    Reconciler(dq, get_settings(), ("default",)).run_all(assume_lost=True)
    assert in_redis(dq, old.id)


def test_eager_mode_replaces_without_redis(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "EAGER": True, "REDIS_URL": "redis://127.0.0.1:1/0"}
    with transaction.atomic():  # the eager runs wait for the commit
        old = schedule(jobs.add, 1, 2, key="k", on_conflict="replace")
        new = schedule(jobs.add, 3, 4, key="k", on_conflict="replace")
    assert (row(old).status, row(old).last_error) == (JobStatus.CANCELLED,
                                                      "replaced by %s" % new.id)
    assert (row(new).status, row(new).result) == (JobStatus.SUCCEEDED, 7)


def test_replace_while_redis_is_down_cancels_by_the_row(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    old = schedule(jobs.noop, key="k", on_conflict="replace")  # its row waits for the reconciler
    new = schedule(jobs.noop, key="k", on_conflict="replace")
    assert (row(old).status, row(old).last_error) == (JobStatus.CANCELLED,
                                                      "replaced by %s" % new.id)
    assert row(new).status == JobStatus.SCHEDULED and holder("k") == new.id


def test_replace_after_the_job_finished_simply_schedules(dq) -> None:  # type: ignore[no-untyped-def]
    first = schedule(jobs.noop, key="k", on_conflict="replace")
    wait_until(lambda: burst() == 0 and row(first).status == JobStatus.SUCCEEDED, timeout=60)
    second = schedule(jobs.noop, key="k", on_conflict="replace", delay=3600)
    assert (row(first).status, row(first).last_error) == (JobStatus.SUCCEEDED, "")
    assert row(second).status == JobStatus.SCHEDULED and holder("k") == second.id


def test_replace_takes_over_a_keep_job_of_the_same_key(dq) -> None:  # type: ignore[no-untyped-def]
    kept = schedule(jobs.noop, key="k", delay=3600)
    new = schedule(jobs.noop, key="k", on_conflict="replace", delay=3600)
    assert row(kept).last_error == "replaced by %s" % new.id
    assert row(kept).status == JobStatus.CANCELLED


def test_a_replaced_waiting_job_cancels_its_children(dq) -> None:  # type: ignore[no-untyped-def]
    parent = schedule(jobs.noop, delay=3600)
    waiting = schedule(jobs.noop, key="k", on_conflict="replace", after=[parent])
    child = schedule(jobs.noop, after=[waiting])
    assert row(waiting).status == JobStatus.WAITING
    new = schedule(jobs.noop, key="k", on_conflict="replace", after=[parent])
    assert row(waiting).last_error == "replaced by %s" % new.id
    assert (row(child).status, row(child).last_error) == (
        JobStatus.CANCELLED, "parent %s ended cancelled" % waiting.id)
    assert row(new).status == JobStatus.WAITING


def test_a_replace_born_cancelled_leaves_the_live_job_and_its_key(dq) -> None:  # type: ignore[no-untyped-def]
    """A parent already failed: the new job is cancelled at birth. It would never run, so
    it does not replace the live job of its key, nor take the key."""
    live = schedule(jobs.noop, 1, key="k", on_conflict="replace", delay=3600)
    failed = schedule(jobs.noop, delay=3600)
    failed.cancel()
    born = schedule(jobs.noop, 2, key="k", on_conflict="replace", after=[failed])
    assert row(born).status == JobStatus.CANCELLED
    assert row(live).status == JobStatus.SCHEDULED and in_redis(dq, live.id)
    assert holder("k") == live.id


def test_replace_lets_a_running_job_run_on_and_schedules_the_new_one(  # type: ignore[no-untyped-def]
        dq, start_worker, tmp_path) -> None:
    gate = tmp_path / "gate"
    running = schedule(jobs.report_then_wait, "old", str(gate), key="k", on_conflict="replace")
    start_worker("--queues", "default", "--concurrency", "2")
    wait_until(lambda: row(running).status == JobStatus.RUNNING, timeout=60)
    new = schedule(jobs.report_then_wait, "new", str(gate), key="k", on_conflict="replace",
                   delay=3600)
    assert row(running).status == JobStatus.RUNNING and holder("k") == new.id
    assert row(new).status == JobStatus.SCHEDULED
    gate.touch()
    wait_until(lambda: row(running).status == JobStatus.SUCCEEDED, timeout=60)
    assert row(running).result == "old" and row(new).status == JobStatus.SCHEDULED


# -- drop ------------------------------------------------------------------------------

def test_drop_returns_the_pending_job_and_schedules_nothing(dq) -> None:  # type: ignore[no-untyped-def]
    first = schedule(jobs.noop, 1, key="k", on_conflict="drop", delay=3600)
    again = schedule(jobs.noop, 2, key="k", on_conflict="drop")
    assert again.id == first.id and Job.objects.count() == 1
    assert row(first).args == [1] and row(first).status == JobStatus.SCHEDULED


def test_drop_while_running_then_a_new_job_once_it_finished(  # type: ignore[no-untyped-def]
        dq, start_worker, tmp_path) -> None:
    gate = tmp_path / "gate"
    running = schedule(jobs.report_then_wait, "old", str(gate), key="k", on_conflict="drop")
    start_worker("--queues", "default")
    wait_until(lambda: row(running).status == JobStatus.RUNNING, timeout=60)
    assert schedule(jobs.noop, key="k", on_conflict="drop").id == running.id
    gate.touch()
    wait_until(lambda: row(running).status == JobStatus.SUCCEEDED, timeout=60)
    after = schedule(jobs.noop, key="k", on_conflict="drop", delay=3600)
    assert after.id != running.id and holder("k") == after.id
    assert Job.objects.count() == 2


def test_keys_are_per_queue(dq) -> None:  # type: ignore[no-untyped-def]
    a = schedule(jobs.noop, key="k", on_conflict="drop", delay=3600)
    b = schedule(jobs.noop, key="k", on_conflict="drop", delay=3600, queue="emails")
    assert a.id != b.id and (holder("k"), holder("k", "emails")) == (a.id, b.id)


def test_job_using_on_conflict(dq) -> None:  # type: ignore[no-untyped-def]
    call = job(jobs.noop).using(key="k", on_conflict="replace", delay=3600)
    old, new = call.schedule(on_conflict="an argument"), call.schedule()
    assert row(old).kwargs == {"on_conflict": "an argument"}
    assert row(old).last_error == "replaced by %s" % new.id


# -- schedule_many ---------------------------------------------------------------------

def test_schedule_many_with_mixed_keys(dq) -> None:  # type: ignore[no-untyped-def]
    pending = schedule(jobs.noop, key="r", on_conflict="replace", delay=3600)
    live = schedule(jobs.noop, key="d", on_conflict="drop", delay=3600)
    specs = [JobSpec(args=[1], key="r", on_conflict="replace", delay=3600),
             JobSpec(args=[2], key="d", on_conflict="drop"),
             JobSpec(args=[3], key="kept"),
             JobSpec(args=[4]),
             JobSpec(args=[5], key="r", on_conflict="replace", delay=3600)]
    out = schedule_many(jobs.noop, specs)
    assert out[1] == live.id and out[2] == ids.id_for_key("default", "kept")
    assert row(pending).last_error == "replaced by %s" % out[0]
    assert row(out[0]).last_error == "replaced by %s" % out[4]
    assert holder("r") == out[4] and row(out[4]).args == [5]
    assert [row(i).status for i in out[2:]] == [JobStatus.SCHEDULED] * 3
    assert Job.objects.count() == 6
    assert schedule_many(jobs.noop, specs[1:3]) == out[1:3]  # replayed: nothing new


# -- bad input -------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda: schedule(jobs.noop, key="k", on_conflict="bogus"),
    lambda: job(jobs.noop).using(key="k", on_conflict="bogus"),
    lambda: schedule_many(jobs.noop, [JobSpec(key="k", on_conflict="bogus")]),
])
def test_an_unknown_on_conflict_is_refused_naming_it(dq, call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match="on_conflict='bogus'"):
        call()
    assert not Job.objects.exists() and not JobKey.objects.exists()


@pytest.mark.parametrize("mode", ["replace", "drop"])
def test_on_conflict_without_a_key_is_refused(dq, mode) -> None:  # type: ignore[no-untyped-def]
    for call in (lambda: schedule(jobs.noop, on_conflict=mode),
                 lambda: job(jobs.noop).using(on_conflict=mode),
                 lambda: schedule_many(jobs.noop, [JobSpec(on_conflict=mode)])):
        with pytest.raises(InvalidJob, match="on_conflict=%r needs a key" % mode):
            call()
    assert not Job.objects.exists()


def test_a_non_string_on_conflict_is_refused_naming_it(dq) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=r"on_conflict=\[1\]"):
        schedule(jobs.noop, key="k", on_conflict=[1])  # type: ignore[arg-type]


def takes_on_conflict(on_conflict: str = "") -> None:
    """A job function with an argument named like the option."""


def test_a_function_taking_on_conflict_must_use_job_using(settings, dq) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "ALLOWED_CALLABLES": [
        *settings.DELAYQ["ALLOWED_CALLABLES"], "tests.core.test_dedup"]}
    with pytest.raises(InvalidJob, match="argument named 'on_conflict'"):
        schedule(takes_on_conflict, key="k", on_conflict="drop")
    call = job(takes_on_conflict).using(key="k", on_conflict="drop", delay=3600)
    assert call.schedule(on_conflict="x").id == call.schedule(on_conflict="y").id


# -- concurrent calls (PostgreSQL: row locks, real concurrency) ------------------------

THREADS, CALLS = 8, 12
needs_postgres = pytest.mark.skipif(not ON_POSTGRES, reason="concurrent transactions and row "
                                    "locks: PostgreSQL only (DELAYQ_TEST_DB=postgres)")


def hammer(mode: str, out: Any) -> list[str]:
    """THREADS threads, each with its own connection, CALLS calls each, one key, every job
    due at once (no worker runs meanwhile). Returns the ids the calls returned."""
    returned: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def run(t: int) -> None:
        try:
            start.wait(timeout=60)
            returned.extend(schedule(jobs.record, str(out), "%d-%d" % (t, i), key="hot",
                                     on_conflict=mode).id for i in range(CALLS))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors
    assert len(returned) == THREADS * CALLS
    return returned


@needs_postgres
def test_concurrent_replace_leaves_exactly_one_pending_holder(dq, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "log"
    returned = hammer("replace", out)
    rows = {r.id: r for r in Job.objects.filter(key="hot")}
    assert set(rows) == set(returned) and len(rows) == THREADS * CALLS
    pending = [i for i, r in rows.items() if r.status == JobStatus.SCHEDULED]
    assert pending == [holder("hot")]
    successor = {i: r.last_error.removeprefix("replaced by ") for i, r in rows.items()
                 if i != pending[0]}
    assert all(rows[i].status == JobStatus.CANCELLED for i in successor)
    # One chain: the first call replaced nothing, each other call replaced one job.
    first = set(rows) - set(successor.values())
    assert len(first) == 1
    walk, seen = first.pop(), []
    while walk in successor:
        seen.append(walk)
        walk = successor[walk]
    assert walk == pending[0] and len(seen) == len(rows) - 1
    # A worker runs the holder only (a replaced job Redis still holds is set aside).
    wait_until(lambda: burst() == 0 and rows[pending[0]].refresh_from_db() is None
               and rows[pending[0]].status == JobStatus.SUCCEEDED, timeout=120)
    assert tags(out) == rows[pending[0]].args[1:]


@needs_postgres
def test_concurrent_drop_creates_exactly_one_job(dq, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "log"
    returned = hammer("drop", out)
    assert len(set(returned)) == 1
    assert list(Job.objects.filter(key="hot").values_list("id", flat=True)) == [returned[0]]
    assert holder("hot") == returned[0]
    wait_until(lambda: burst() == 0 and row(returned[0]).status == JobStatus.SUCCEEDED,
               timeout=120)
    assert len(tags(out)) == 1
    # Once it finished, the key row exists and names a final job: one new job again.
    again = hammer("drop", out)
    assert len(set(again)) == 1 and again[0] != returned[0]
    assert Job.objects.filter(key="hot").count() == 2 and holder("hot") == again[0]
