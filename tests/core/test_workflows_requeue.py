"""``requeue()`` of a workflow child copies its parents too: the copy waits for them as
the original did (``after_failure`` as the original's), or is born cancelled by one that
failed, instead of running at once (docs/workflows.md, docs/guide.md)."""

from __future__ import annotations

import pytest

from django_delayq import cancel, requeue, schedule
from django_delayq.core.api import group, job
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobDependency, JobStatus
from tests import jobs
from tests.helpers import burst, point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    return get_engine()


def status(job_id: str) -> str:
    return Job.objects.get(pk=job_id).status


def edges(child_id: str) -> list[tuple[str, bool, bool]]:
    return list(JobDependency.objects.filter(child_id=child_id).order_by("pk").values_list(
        "parent_id", "resolved", "run_on_failure"))


def run_until(predicate) -> None:  # type: ignore[no-untyped-def]
    wait_until(lambda: burst() == 0 and predicate(), timeout=60)


def test_the_copy_of_a_cancelled_child_waits_for_its_parent(dq, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "log"
    parent = schedule(jobs.record, str(out), "parent", delay=3600)
    child = schedule(jobs.record, str(out), "child", after=[parent])
    cancel(child.id)
    copy = requeue(child.id)
    row = Job.objects.get(pk=copy.id)
    assert (row.status, row.parents_left, row.requeued_from) == (JobStatus.WAITING, 1, child.id)
    assert edges(copy.id) == [(parent.id, False, False)]
    assert burst() == 0 and not out.exists()  # nothing ran before its parent
    dq.reschedule("default", parent.id, delay_ms=0)
    run_until(lambda: status(copy.id) == JobStatus.SUCCEEDED)
    assert [line.split()[0] for line in out.read_text().splitlines()] == ["parent", "child"]


def test_the_copy_keeps_after_failure_run(dq) -> None:  # type: ignore[no-untyped-def]
    first, second = schedule(jobs.noop, delay=3600), schedule(jobs.noop, delay=3600)
    child = schedule(jobs.noop, after=[first, second], after_failure="run")
    cancel(child.id)
    copy = requeue(child.id)
    assert edges(copy.id) == [(first.id, False, True), (second.id, False, True)]
    cancel(first.id)
    assert status(copy.id) == JobStatus.WAITING  # one parent left
    cancel(second.id)
    assert status(copy.id) == JobStatus.SCHEDULED  # runs anyway, as the original would have


def test_the_copy_of_a_then_whose_member_died_is_born_cancelled(dq) -> None:  # type: ignore[no-untyped-def]
    result = group([job(jobs.boom).using(max_attempts=1).s(), job(jobs.noop).s()],
                   then=job(jobs.noop).s("summary"))
    assert result.then is not None
    run_until(lambda: status(result.then.id) == JobStatus.CANCELLED)
    dead = result.ids[0]
    assert status(dead) == JobStatus.DEAD
    copy = requeue(result.then.id)
    row = Job.objects.get(pk=copy.id)
    assert (row.status, row.last_error) == (JobStatus.CANCELLED, "parent %s ended dead" % dead)
    assert requeue(dead).id == dead  # fresh attempts under its id: the next copy waits for it
    again = requeue(result.then.id)
    assert status(again.id) == JobStatus.WAITING
    assert [p for p, _, _ in edges(again.id)] == result.ids
