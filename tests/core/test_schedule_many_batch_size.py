"""``schedule_many``'s ``batch_size`` (rows per INSERT) is checked before anything is
written or sent: a bad one raises ``InvalidJob`` naming it, by every way in that takes
it. ``batch_size=-1`` used to return ids and put the jobs in Redis with no row written
(the worker then set each one aside: jobs lost); ``0`` raised ``range()``'s
``ValueError``, a string or a float a ``TypeError``, after the checks of the specs."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction

from django_delayq import InvalidJob
from django_delayq.core.api import JobSpec, job, schedule, schedule_many
from django_delayq.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "tests.jobs.add"


def ways_in(batch_size: object) -> dict[str, Callable[[], Any]]:
    """Each way in that takes ``batch_size``, and both of schedule_many's paths."""
    specs = [JobSpec(args=(1, 2)), JobSpec(args=(3, 4), key="k-3")]
    return {
        "schedule_many": lambda: schedule_many(ADD, specs, batch_size=batch_size),
        "schedule_many, no spec": lambda: schedule_many(ADD, [], batch_size=batch_size),
        "schedule_many, one at a time": lambda: schedule_many(ADD, specs, after=[],
                                                              batch_size=batch_size),
        "schedule_many, a spec alone": lambda: schedule_many(
            ADD, [*specs, JobSpec(args=(5, 6), queue="emails")], batch_size=batch_size),
        "job().schedule_many": lambda: job(ADD).schedule_many(specs, batch_size=batch_size),
        "job().using().schedule_many": lambda: job(ADD).using(priority=3).schedule_many(
            specs, batch_size=batch_size),
    }


@pytest.mark.parametrize(("batch_size", "shown"), [
    (-1, "-1"), (0, "0"), ("x", "'x'"), (1.5, "1.5"), (True, "True"), (None, "None"),
    ("1000", "'1000'"), (2.0, "2.0"),
])
def test_a_bad_batch_size_is_refused_before_anything_is_written_or_sent(
        delayq_engine, batch_size, shown) -> None:  # type: ignore[no-untyped-def]
    message = "batch_size must be an integer of at least 1 (not a bool), not %s" % shown
    for way, call in ways_in(batch_size).items():
        with pytest.raises(InvalidJob, match="^%s$" % re.escape(message)):
            call()
        assert not Job.objects.exists(), way
        stats = delayq_engine.stats("default")
        assert stats.scheduled + stats.ready == 0, way
        assert delayq_engine.stats("emails").scheduled == 0, way


def test_the_callers_transaction_goes_on_after_the_refusal(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        with pytest.raises(InvalidJob, match="batch_size"):
            schedule_many(ADD, [JobSpec(args=(1, 2))], batch_size=-1)
        kept = schedule(ADD, 1, 2)
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.id]
    assert delayq_engine.inspect("default", kept.id).place == "pending"


@pytest.mark.parametrize("batch_size", [1, 2, 10**30])
def test_a_positive_batch_size_writes_every_row(delayq_engine, batch_size) -> None:  # type: ignore[no-untyped-def]
    out = schedule_many(ADD, [JobSpec(args=(n, n)) for n in range(5)], batch_size=batch_size)
    rows = dict(Job.objects.values_list("pk", "args"))
    assert [rows[i] for i in out] == [[n, n] for n in range(5)]
    assert {delayq_engine.inspect("default", i).place for i in out} == {"pending"}
