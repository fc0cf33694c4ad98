"""Children cancelled because a parent failed each send ``job_cancelled`` once
(docs/signals.md), whichever process ends the parent: ``cancel()``, a real worker's
settlement, lease recovery."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_delayq import cancel, compat, schedule, signals
from django_delayq.models import Job
from django_delayq.testing import run_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cancelled(delayq_settings) -> Iterator[list[dict[str, Any]]]:  # type: ignore[no-untyped-def]
    log: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        log.append(kwargs)

    signals.job_cancelled.connect(receiver, weak=False)
    yield log
    signals.job_cancelled.disconnect(receiver)


def _finished_cancelled() -> float:
    """``delayq_jobs_finished_total{status="cancelled"}`` of queue default (0 without
    prometheus-client)."""
    if compat.prometheus_client is None:
        return 0.0
    from django_delayq.observe import prometheus

    return prometheus.REGISTRY.get_sample_value("delayq_jobs_finished_total", {
        "queue": "default", "status": "cancelled"}) or 0.0


def _chain(parent: Any) -> tuple[str, str]:
    child = schedule("tests.jobs.noop", after=parent)
    return child.id, schedule("tests.jobs.noop", after=child).id


def test_a_parent_dead_in_a_worker_sends_job_cancelled_per_child(cancelled):
    parent = schedule("tests.jobs.boom", max_attempts=1)
    child, grandchild = _chain(parent)
    assert run_worker() == 1
    rows = dict(Job.objects.values_list("pk", "status"))
    assert rows == {parent.id: "dead", child: "cancelled", grandchild: "cancelled"}
    assert sorted((kw["job_id"], kw["running"], kw["callable_path"]) for kw in cancelled) == \
        sorted([(child, False, "tests.jobs.noop"), (grandchild, False, "tests.jobs.noop")])


def test_cancel_of_a_parent_sends_job_cancelled_per_child(cancelled):
    parent = schedule("tests.jobs.noop", delay=60)
    child, grandchild = _chain(parent)
    cancel(parent.id)
    assert sorted(kw["job_id"] for kw in cancelled) == sorted([parent.id, child, grandchild])


def test_children_scheduled_after_a_parent_died_send_job_cancelled(cancelled):
    """A worker ended the parent before its children were scheduled (a running worker
    takes a failing job in milliseconds): each child is cancelled as it is scheduled,
    and sends ``job_cancelled`` then as it would have had it waited."""
    parent = schedule("tests.jobs.boom", max_attempts=1)
    assert run_worker() == 1 and Job.objects.get(pk=parent.id).status == "dead"
    before = _finished_cancelled()
    child, grandchild = _chain(parent)
    rows = dict(Job.objects.filter(pk__in=[child, grandchild]).values_list("pk", "last_error"))
    assert rows == {child: "parent %s ended dead" % parent.id,
                    grandchild: "parent %s ended cancelled" % child}
    assert [(kw["job_id"], kw["running"], kw["callable_path"]) for kw in cancelled] == [
        (child, False, "tests.jobs.noop"), (grandchild, False, "tests.jobs.noop")]
    if compat.prometheus_client is not None:
        assert _finished_cancelled() == before + 2
