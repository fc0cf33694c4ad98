"""Jobs that wait for other jobs: ``after=``, ``after_failure``, ``chain`` and ``group``,
bad input, cancel cascades, and the release invariant (docs/internals.md, "Workflows:
the release invariant") with real workers on a private Redis."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_delayq import InvalidJob, MoveOutcome, cancel, job, reschedule, run_now, schedule
from django_delayq.core import workflows
from django_delayq.core.api import JobSpec, chain, group, schedule_many
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobDependency, JobStatus
from tests import jobs
from tests.helpers import burst, point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server, ALLOWED_CALLABLES=["tests.jobs", "tests.jobs_more"])
    return get_engine()


def status(handle) -> str:  # type: ignore[no-untyped-def]
    return Job.objects.get(pk=handle if isinstance(handle, str) else handle.id).status


def run_until(predicate) -> None:  # type: ignore[no-untyped-def]
    """Burst workers until ``predicate()``: a child released by a worker's last audit
    flush reaches Redis after that burst worker found nothing due and exited."""
    wait_until(lambda: burst() == 0 and predicate(), timeout=60)


def tags(path) -> list[str]:  # type: ignore[no-untyped-def]
    """The tags ``jobs.record`` wrote, in order."""
    return [line.split()[0] for line in path.read_text().splitlines()]


def in_redis(engine, job_id: str, queue: str = "default") -> bool:  # type: ignore[no-untyped-def]
    return engine.inspect(queue, job_id).place != ""


# -- schedule time ---------------------------------------------------------------------

def test_a_child_waits_outside_redis_until_its_parent_succeeded(dq, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "log"
    a = schedule(jobs.record, str(out), "a", delay=3600)
    with transaction.atomic():  # waiting from its scheduling transaction on: not moved
        b = schedule(jobs.record, str(out), "b", after=[a])
        assert run_now(b.id) is MoveOutcome.NOT_FOUND
    row = Job.objects.get(pk=b.id)
    assert (row.status, row.parents_left) == (JobStatus.WAITING, 1)
    assert reschedule(b.id, delay=0) is MoveOutcome.NOT_FOUND
    assert Job.objects.get(pk=b.id).run_at == row.run_at
    assert not in_redis(dq, b.id)
    assert list(JobDependency.objects.filter(child_id=b.id).values_list(
        "parent_id", "resolved")) == [(a.id, False)]
    dq.reschedule("default", a.id, delay_ms=0)
    run_until(lambda: status(b) == JobStatus.SUCCEEDED)
    assert status(a) == JobStatus.SUCCEEDED
    assert tags(out) == ["a", "b"]


def test_a_parent_already_finished_is_honoured_at_once(dq) -> None:  # type: ignore[no-untyped-def]
    a = schedule(jobs.noop)
    burst()
    assert status(a) == JobStatus.SUCCEEDED
    b = schedule(jobs.noop, after=[a.id])
    assert status(b) == JobStatus.SCHEDULED and in_redis(dq, b.id)
    dead = schedule(jobs.noop, delay=3600)
    cancel(dead.id)
    c = schedule(jobs.noop, after=[dead])
    row = Job.objects.get(pk=c.id)
    assert row.status == JobStatus.CANCELLED
    assert row.last_error == "parent %s ended cancelled" % dead.id
    d = schedule(jobs.noop, after=[dead], after_failure="run")
    assert status(d) == JobStatus.SCHEDULED


@pytest.mark.parametrize("bad, named", [
    (["0" * 26], "no job with id '%s'" % ("0" * 26)),
    ([42], "42"),
    ([{"id": 1}], "{'id': 1}"),
    ({"a": 1}, "{'a': 1}"),  # a dict is not a list of ids, nor are bytes
    (b"01m8", "b'01m8'"),
])
def test_bad_parents_are_refused_naming_them(dq, bad, named) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=named.replace("{", r"\{").replace("}", r"\}")):
        schedule(jobs.noop, after=bad)
    assert not Job.objects.exists()


def test_a_bad_after_failure_is_refused_naming_it(dq) -> None:  # type: ignore[no-untyped-def]
    a = schedule(jobs.noop, delay=60)
    with pytest.raises(InvalidJob, match="after_failure='sometimes'"):
        schedule(jobs.noop, after=[a], after_failure="sometimes")
    with pytest.raises(InvalidJob, match="after_failure='sometimes'"):
        job(jobs.noop).using(after=[a], after_failure="sometimes")


def test_a_job_cannot_wait_for_itself_nor_close_a_cycle(dq) -> None:  # type: ignore[no-untyped-def]
    a = schedule(jobs.noop, delay=60, key="k-a")
    with pytest.raises(InvalidJob, match="cannot wait for itself"):
        schedule(jobs.noop, key="k-a", after=[a])
    # A keyed id is known before its job exists: b waits for it, then it asks to wait for b.
    from django_delayq.core import ids

    future = ids.id_for_key("default", "k-future")
    JobDependency.objects.create(parent_id=future, child_id=a.id)
    b = schedule(jobs.noop, after=[a])
    with pytest.raises(InvalidJob, match="cycle"):
        schedule(jobs.noop, key="k-future", after=[b])
    assert not Job.objects.filter(pk=future).exists()


# -- failure, cancel, cascade ----------------------------------------------------------

def test_a_dead_parent_cancels_its_children_and_grandchildren_naming_the_parent(dq) -> None:  # type: ignore[no-untyped-def]
    a = job(jobs.boom).using(max_attempts=1).schedule("no")
    b = schedule(jobs.noop, after=[a])
    c = schedule(jobs.noop, after=[b])
    d = schedule(jobs.noop, after=[a], after_failure="run")
    run_until(lambda: status(d) == JobStatus.SUCCEEDED)
    assert status(a) == JobStatus.DEAD
    rows = {r.pk: r for r in Job.objects.filter(pk__in=[b.id, c.id])}
    assert rows[b.id].status == rows[c.id].status == JobStatus.CANCELLED
    assert rows[b.id].last_error == "parent %s ended dead" % a.id
    assert rows[c.id].last_error == "parent %s ended cancelled" % b.id


def test_cancelling_a_waiting_job_cancels_its_children(dq) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import signals

    a = schedule(jobs.noop, delay=3600)
    b = schedule(jobs.noop, after=[a])
    c = schedule(jobs.noop, after=[b])
    seen: list[str] = []

    def receiver(sender, job_id, **kwargs) -> None:  # type: ignore[no-untyped-def]
        seen.append(job_id)

    signals.job_cancelled.connect(receiver)
    try:
        assert cancel(b.id).name == "CANCELLED"
    finally:
        signals.job_cancelled.disconnect(receiver)
    assert status(b) == status(c) == JobStatus.CANCELLED
    assert sorted(seen) == sorted([b.id, c.id])  # the cascade signals each job it cancels
    assert status(a) == JobStatus.SCHEDULED
    cancel(a.id)
    assert JobDependency.objects.filter(resolved=False).count() == 0


def test_a_child_of_two_parents_waits_for_both(dq) -> None:  # type: ignore[no-untyped-def]
    a = schedule(jobs.noop)
    b = schedule(jobs.noop, delay=3600)
    c = schedule(jobs.noop, after=[a, b])
    burst()
    assert (status(a), status(b), status(c)) == ("succeeded", "scheduled", "waiting")
    assert Job.objects.get(pk=c.id).parents_left == 1
    dq.reschedule("default", b.id, delay_ms=0)
    run_until(lambda: status(c) == JobStatus.SUCCEEDED)


# -- chain and group -------------------------------------------------------------------

def test_chain_runs_each_piece_after_the_one_before(dq, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "log"
    rec = job(jobs.record)
    handles = chain(rec.s(str(out), "1"), rec.s(str(out), "2"), rec.s(str(out), "3"))
    assert [status(h) for h in handles] == ["scheduled", "waiting", "waiting"]
    run_until(lambda: status(handles[-1]) == JobStatus.SUCCEEDED)
    assert tags(out) == ["1", "2", "3"]


def test_group_then_runs_the_summary_once_after_every_member(dq, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "log"
    rec = job(jobs.record)
    res = group([rec.s(str(out), "m%d" % i) for i in range(30)],
                then=rec.s(str(out), "summary"))
    assert len(res.ids) == 30 and res.then is not None
    assert Job.objects.get(pk=res.then.id).parents_left == 30
    run_until(lambda: status(res.then) == JobStatus.SUCCEEDED)  # type: ignore[arg-type]
    lines = tags(out)
    assert lines.count("summary") == 1 and lines[-1] == "summary" and len(lines) == 31


def test_chain_and_group_refuse_what_is_not_a_signature(dq) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match="item 1 is 'oops'"):
        chain(job(jobs.noop).s(), "oops")  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match=r"not 3 \(int\)"):
        group([job(jobs.noop).s()], then=3)  # type: ignore[arg-type]
    assert not Job.objects.exists()


def test_schedule_many_with_after_makes_every_job_wait(dq) -> None:  # type: ignore[no-untyped-def]
    a = schedule(jobs.noop, delay=3600)
    ids = schedule_many(jobs.add, [JobSpec(args=(i, i)) for i in range(3)], after=[a])
    assert {status(i) for i in ids} == {"waiting"}
    other = schedule_many(jobs.noop, [JobSpec(after=[a.id]), JobSpec()])
    assert [status(i) for i in other] == ["waiting", "scheduled"]


# -- the release invariant: the crash window -------------------------------------------

def test_a_release_committed_without_its_enqueue_is_enqueued_by_the_reconciler(dq) -> None:  # type: ignore[no-untyped-def]
    """The state a crash leaves between the commit of a parent's final row (which
    released the child) and the child's on-commit enqueue: a live ``scheduled`` row that
    Redis does not hold. The reconciler (the outbox) enqueues it, once."""
    from django_delayq.core.conf import get_settings
    from django_delayq.core.reconcile import Reconciler

    a = schedule(jobs.noop, delay=3600)
    b = schedule(jobs.noop, after=[a])
    Job.objects.filter(pk=a.id).update(status=JobStatus.SUCCEEDED)
    dq.cancel("default", a.id)
    # The parent's final row commits; the process dies before the on-commit enqueue:
    # resolve inside a transaction whose on-commit hooks never reach Redis.
    from django.db import transaction

    with transaction.atomic():
        released = workflows.resolve([a.id], "default")
        transaction.get_connection().run_on_commit.clear()
    assert released == [b.id]
    assert status(b) == JobStatus.SCHEDULED and not in_redis(dq, b.id)
    assert Reconciler(dq, get_settings(), ("default",)).run_all(grace_seconds=0) == 1
    assert in_redis(dq, b.id)
    assert workflows.resolve([a.id], "default") == []  # resolved once: never doubled
    run_until(lambda: status(b) == JobStatus.SUCCEEDED)


def test_the_sweep_releases_children_of_a_parent_made_final_without_the_hook(dq) -> None:  # type: ignore[no-untyped-def]
    a = schedule(jobs.noop, delay=3600)
    b = schedule(jobs.noop, after=[a])
    dq.cancel("default", a.id)
    Job.objects.filter(pk=a.id).update(status=JobStatus.SUCCEEDED)  # by hand, no hook
    assert status(b) == JobStatus.WAITING
    assert workflows.sweep("default") == 1
    assert status(b) == JobStatus.SCHEDULED and in_redis(dq, b.id)
    assert workflows.sweep("default") == 0


def test_job_using_after_and_a_function_argument_named_after(dq) -> None:  # type: ignore[no-untyped-def]
    a = schedule(jobs.noop, delay=3600)
    b = job(jobs.noop).using(after=[a], queue="emails").schedule(after="an argument")
    row = Job.objects.get(pk=b.id)
    assert (row.status, row.queue, row.kwargs) == ("waiting", "emails", {"after": "an argument"})
    with pytest.raises(InvalidJob, match="after"):
        schedule("tests.jobs_more.named_like_after", after=[a])


def test_cancel_leaves_a_dead_job_dead(dq) -> None:  # type: ignore[no-untyped-def]
    """A dead job is final (kept for investigation and requeue): cancel() answers
    NOT_FOUND, its row stays dead and Redis keeps it in dead, for requeue by id."""
    from django_delayq.engine.outcomes import CancelOutcome
    dead = schedule("tests.jobs_more.raise_value_error", "once", max_attempts=1)
    assert burst() == 0
    assert dead.status == JobStatus.DEAD
    assert get_engine().inspect("default", dead.id).place == "dead"
    assert cancel(dead.id) is CancelOutcome.NOT_FOUND
    assert dead.status == JobStatus.DEAD
    assert get_engine().inspect("default", dead.id).place == "dead"
