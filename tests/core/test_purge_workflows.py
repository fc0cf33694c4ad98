"""A purge takes the workflow children of its queue or group too: their rows are
``waiting`` and absent from Redis, so no look at Redis finds them, yet ``purge_queue``
removes "every waiting job of the queue" and ``purge_group`` "the group's waiting jobs"
(docs/guide.md, docs/groups.md). The dependents of what a purge cancels follow at once,
as ``cancel()`` resolves them (docs/workflows.md)."""

from __future__ import annotations

import pytest

from django_delayq import cancel, purge_group, purge_queue, schedule
from django_delayq.core.api import group, job
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus
from tests import jobs
from tests.helpers import burst, point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)
    return get_engine()


def row(handle) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    found = Job.objects.get(pk=handle.id)
    return found.status, found.last_error


def runs_then_child_stays(dq, parent, child, out) -> None:  # type: ignore[no-untyped-def]
    """The parent, brought forward, runs; the purged child never does."""
    dq.reschedule("default", parent.id, delay_ms=0)
    wait_until(lambda: burst(("default", "emails")) == 0
               and row(parent)[0] == JobStatus.SUCCEEDED, timeout=60)
    assert row(child)[0] == JobStatus.CANCELLED
    assert [line.split()[0] for line in out.read_text().splitlines()] == ["parent"]


def test_purge_group_cancels_the_groups_waiting_children(dq, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "log"
    parent = schedule(jobs.record, str(out), "parent", delay=3600)
    child = schedule(jobs.record, str(out), "child", after=[parent], group="pgx")
    assert row(child)[0] == JobStatus.WAITING
    assert purge_group("default", "pgx") == 1
    assert row(child) == (JobStatus.CANCELLED, "purged from group pgx of queue default")
    runs_then_child_stays(dq, parent, child, out)


def test_purge_queue_cancels_the_queues_waiting_children(dq, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "log"
    parent = schedule(jobs.record, str(out), "parent", delay=3600)
    child = schedule(jobs.record, str(out), "child", after=[parent], queue="emails")
    grandchild = schedule(jobs.record, str(out), "grandchild", after=[child])
    assert purge_queue("emails") == 1
    assert row(child) == (JobStatus.CANCELLED, "purged from queue emails")
    # its own child, in another queue, follows in the same transaction, as cancel()'s does
    assert row(grandchild) == (JobStatus.CANCELLED, "parent %s ended cancelled" % child.id)
    assert purge_queue("emails") == 0
    runs_then_child_stays(dq, parent, child, out)


def test_a_chain_in_one_group_is_counted_whole(dq) -> None:  # type: ignore[no-untyped-def]
    first = schedule(jobs.noop, delay=3600, group="g")
    second = schedule(jobs.noop, after=[first], group="g")
    third = schedule(jobs.noop, after=[second], group="g")
    assert purge_group("default", "g") == 3
    assert {row(h)[0] for h in (first, second, third)} == {JobStatus.CANCELLED}


@pytest.mark.parametrize("purge", ["group", "queue"])
def test_members_a_purge_cancels_cancel_their_then_at_once(dq, purge) -> None:  # type: ignore[no-untyped-def]
    member = job(jobs.noop).using(delay=3600, group="members", queue="emails")
    result = group([member.s(i) for i in range(3)], then=job(jobs.noop).s("summary"))
    assert result.then is not None and row(result.then)[0] == JobStatus.WAITING
    removed = purge_group("emails", "members") if purge == "group" else purge_queue("emails")
    assert removed == 3
    status, why = row(result.then)  # no reconciler pass: the purge's own transaction
    assert status == JobStatus.CANCELLED and why.startswith("parent ")
    assert why.endswith(" ended cancelled")


def test_cancel_of_a_member_does_the_same(dq) -> None:  # type: ignore[no-untyped-def]
    result = group([job(jobs.noop).using(delay=3600).s(1)], then=job(jobs.noop).s())
    cancel(result.ids[0])
    assert result.then is not None and row(result.then)[0] == JobStatus.CANCELLED
