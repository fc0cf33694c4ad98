"""Jobs scheduled while the node of their queue is down wait in the outbox; the node comes
back empty (no persistence). Redis never held them, so no delivery of theirs can have
been lost with its data: each runs once, as attempt 1, with no attempt counted for a run
it may have had. A job that was in the lost data may have run there unrecorded: it is
put back under the higher attempt number (docs/cluster.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from django_delayq import schedule
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile_state import UNRECORDED
from django_delayq.models import Job, JobAttempt, JobStatus
from tests.cluster.conftest import running_worker
from tests.cluster.test_node_loss import _kill
from tests.helpers import wait_until

if TYPE_CHECKING:
    from tests.cluster.server import LocalCluster

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_jobs_never_sent_run_as_attempt_1_after_their_node_returns_empty(  # type: ignore[no-untyped-def]
        cluster_settings, redis_cluster: LocalCluster, tmp_path) -> None:
    engine = get_engine()
    down = redis_cluster.node_of(engine.keys("emails").pending)
    out = tmp_path / "runs.txt"
    with running_worker(("emails",), concurrency=2):
        first = schedule("tests.jobs.record", str(out), "first", queue="emails")
        # a delivery of the queue was seen, then the loss: a witnessed loss
        wait_until(lambda: Job.objects.filter(pk=first.id, status=JobStatus.SUCCEEDED)
                   .exists(), 20)
        held = schedule("tests.jobs.record", str(out), "held", queue="emails",
                        delay=timedelta(seconds=1))  # in Redis: lost with its data
        _kill(redis_cluster, down)
        try:
            unsent = [schedule("tests.jobs.record", str(out), "u%d" % i, queue="emails",
                               max_attempts=1) for i in range(3)]
            unsent.append(schedule("tests.jobs.record", str(out), "later", queue="emails",
                                   max_attempts=1, delay=timedelta(seconds=1)))
        finally:
            redis_cluster.restart(down)  # empty: its epoch key is gone
        ids = [h.id for h in unsent]
        wait_until(lambda: Job.objects.filter(pk__in=[*ids, held.id],
                                              status=JobStatus.SUCCEEDED).count() == 5, 45)
    runs = [line.split() for line in out.read_text().splitlines()]
    assert sorted(tag for tag, *_ in runs) == sorted(
        ["first", "held", "u0", "u1", "u2", "later"])  # each once
    attempt = {tag: int(number) for tag, _id, number, _pid in runs}
    assert [attempt[t] for t in ("u0", "u1", "u2", "later")] == [1, 1, 1, 1]
    assert list(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == [1] * 4
    assert not JobAttempt.objects.filter(job_id__in=ids, error=UNRECORDED).exists()
    assert not Job.objects.filter(pk__in=ids).exclude(error_type="").exists()  # mark gone
