"""schedule_many with some specs of their own options (queue, retries, after): those go
one at a time as schedule() does, the others stay one bulk batch; the call keeps its
properties (one transaction, the ids in the order of the specs, a key's first spec
stands, after= on a job of the same call)."""

from __future__ import annotations

import pytest

from django_delayq import InvalidJob
from django_delayq.core import ids
from django_delayq.core.api import JobSpec, schedule_many
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobStatus

pytestmark = pytest.mark.django_db(transaction=True)


def rows() -> dict[str, Job]:
    return {row.pk: row for row in Job.objects.all()}


def test_the_ids_come_back_in_the_order_of_the_specs_and_every_job_reaches_redis(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    specs = [JobSpec(args=(0, 0), backoff=[1]), JobSpec(args=(1, 1)),
             JobSpec(args=(2, 2), queue="emails"), JobSpec(args=(3, 3), priority=7),
             JobSpec(args=(4, 4), max_attempts=9)]
    out = schedule_many("tests.jobs.add", specs, priority=2)
    got = rows()
    assert [got[i].args for i in out] == [[n, n] for n in range(5)]
    assert [(got[i].queue, got[i].priority, got[i].max_attempts) for i in out] == [
        ("default", 2, 2), ("default", 2, 3), ("emails", 2, 3), ("default", 7, 3),
        ("default", 2, 9)]
    assert [delayq_engine.inspect(got[i].queue, i).place for i in out] == ["pending"] * 5


@pytest.mark.parametrize("specs", [
    [JobSpec(args=(1, 2)), JobSpec(args=(3, 4), queue="nope")],  # the one alone is bad
    [JobSpec(args=(1, 2), queue="emails"), JobSpec(args=("x",))],  # one of the batch is
    [JobSpec(args=(1, 2)), JobSpec(args=(3, 4), max_attempts=2), JobSpec(args=(5, 6), after=["nope"])],
])
def test_one_bad_spec_schedules_nothing(delayq_settings, specs) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob):
        schedule_many("tests.jobs.add", specs)
    assert not Job.objects.exists()
    engine = get_engine()
    assert not any(engine.client.keys(engine.keys(q).pending) for q in ("default", "emails"))


def test_the_first_spec_of_a_key_stands_across_both_paths(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    """A spec alone before one of the batch with its key: the one alone stands (both get
    the key's id), as when every spec went one at a time."""
    out = schedule_many("tests.jobs.add", [JobSpec(args=(1, 2), key="k", max_attempts=5),
                                           JobSpec(args=(3, 4), key="k"), JobSpec(args=(5, 6))])
    assert out[0] == out[1] == ids.id_for_key("default", "k")
    got = rows()
    assert (got[out[0]].args, got[out[0]].max_attempts) == ([1, 2], 5)
    assert len(got) == 2 and got[out[2]].args == [5, 6]


def test_a_spec_alone_may_wait_for_a_job_of_the_batch(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    parent = ids.id_for_key("default", "parent")
    out = schedule_many("tests.jobs.add", [JobSpec(args=(1, 2), key="parent"),
                                           JobSpec(args=(3, 4), after=[parent])])
    assert out[0] == parent
    got = rows()
    assert (got[out[0]].status, got[out[1]].status) == (JobStatus.SCHEDULED, JobStatus.WAITING)
