"""Every path that deletes Job rows (the workers' retention, ``delayq_prune``) deletes the
rows' ``JobDependency`` edges with them, as parent and as child, in the same batch; an edge
still open when its parent goes is resolved first, so its child is never stranded."""

from __future__ import annotations

from datetime import timedelta
from importlib.util import find_spec

import pytest
from django.utils import timezone

from django_delayq import cancel, schedule
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobDependency, JobStatus
from django_delayq.worker.retention import delete_batch

pytestmark = pytest.mark.django_db(transaction=True)


def _ended_long_ago(*ids: str, status: str = JobStatus.SUCCEEDED) -> None:
    """Rows made final by hand, 40 days ago (a path without the release hook)."""
    when = timezone.now() - timedelta(days=40)
    Job.objects.filter(pk__in=ids).update(status=status, run_at=when, finished_at=when)


def _fan_in(n: int) -> tuple[list[str], str]:
    parents = [schedule("tests.jobs.noop", i, delay=3600).id for i in range(n)]
    return parents, schedule("tests.jobs.noop", after=parents).id


def test_retention_deletes_the_edges_of_a_pruned_fan_in(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    parents, child = _fan_in(30)
    _ended_long_ago(*parents)
    assert delete_batch("succeeded", 7, limit=10) == (10, 0)  # an open edge: resolved first
    assert JobDependency.objects.count() == 20
    assert Job.objects.get(pk=child).parents_left == 20  # still waiting for the others
    while delete_batch("succeeded", 7, limit=10)[0]:
        pass
    row = Job.objects.get(pk=child)
    assert (row.status, row.parents_left) == (JobStatus.SCHEDULED, 0)  # released, not lost
    assert get_engine().inspect("default", child).place == "pending"
    _ended_long_ago(child)
    assert delete_batch("succeeded", 7) == (1, 0)
    assert JobDependency.objects.count() == 0
    assert not Job.objects.filter(pk__in=[*parents, child]).exists()


def test_a_pruned_child_takes_its_edges_to_parents_still_live(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    (failed, live), child = _fan_in(2)
    cancel(failed)  # the child is cancelled with it; the edge from `live` stays open
    assert Job.objects.get(pk=child).status == JobStatus.CANCELLED
    _ended_long_ago(failed, child, status=JobStatus.CANCELLED)
    assert delete_batch("cancelled", 7) == (2, 0)
    assert JobDependency.objects.count() == 0
    assert Job.objects.get(pk=live).status == JobStatus.SCHEDULED  # untouched


@pytest.mark.skipif(find_spec("pyarrow") is None, reason="delayq_prune needs pyarrow")
def test_delayq_prune_deletes_the_edges_too(delayq_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from django_delayq.spark.prune import prune_jobs

    parents, child = _fan_in(5)
    _ended_long_ago(*parents, child)
    result = prune_jobs(timedelta(days=30), archive=tmp_path, batch_size=2, progress=False)
    assert result.jobs == 6
    assert JobDependency.objects.count() == 0
    assert not Job.objects.exists()
