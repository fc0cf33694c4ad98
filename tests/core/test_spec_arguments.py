"""A JobSpec's ``args``/``kwargs`` of the wrong type, and ``schedule_many`` items that are
not JobSpecs: an ``InvalidJob`` naming the value at schedule time, never a row holding a
string's characters or a dict's keys, nor a ``TypeError``/``AttributeError`` from below."""

from __future__ import annotations

import pytest

from django_delayq import InvalidJob, schedule_spec
from django_delayq.core.api import JobSpec, job, schedule_many
from django_delayq.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

BAD_SPECS = [
    (JobSpec(args="ab"), r"args must be a list or tuple .*, not 'ab' \(str\)"),
    (JobSpec(args=b"ab"), r"args must be a list or tuple .*, not b'ab' \(bytes\)"),
    (JobSpec(args={"a": 1, "b": 2}), r"args must be a list or tuple .*, not \{'a': 1, 'b': 2\} \(dict\)"),
    (JobSpec(args=5), r"args must be a list or tuple .*, not 5 \(int\)"),  # type: ignore[arg-type]
    (JobSpec(args=iter([1, 2])), r"args must be a list or tuple .*\(list_iterator\)"),
    (JobSpec(kwargs=[1]), r"kwargs must be a dict .*, not \[1\] \(list\)"),  # type: ignore[arg-type]
    (JobSpec(kwargs=None), r"kwargs must be a dict .*, not None \(NoneType\)"),  # type: ignore[arg-type]
    (JobSpec(kwargs="a=1"), r"kwargs must be a dict .*, not 'a=1' \(str\)"),  # type: ignore[arg-type]
    (JobSpec(kwargs={1: 2}),  # type: ignore[dict-item]
     r"dict\): kwargs has the key 1 \(int\), not a string as JSON keys are\. Pass an id"),
]


@pytest.mark.parametrize(("spec", "message"), BAD_SPECS)
def test_every_way_in_refuses_args_and_kwargs_of_the_wrong_type(delayq_settings, spec, message) -> None:  # type: ignore[no-untyped-def]
    """schedule_spec, schedule_many (its batch path, and the path of schedule() a spec
    with a queue of its own takes) and job(fn).schedule_many run the same check."""
    with pytest.raises(InvalidJob, match=message):
        schedule_spec("tests.jobs.add", spec)
    with pytest.raises(InvalidJob, match=message):
        schedule_many("tests.jobs.add", [JobSpec(args=(1, 2)), spec])
    with pytest.raises(InvalidJob, match=message):
        schedule_many("tests.jobs.add", [JobSpec(args=(1, 2)), spec], queue="default",
                      after=[])
    with pytest.raises(InvalidJob, match=message):
        job("tests.jobs.add").using(priority=5).schedule_many([spec])
    assert not Job.objects.exists()


def test_a_list_or_tuple_is_taken_as_before(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    first = schedule_spec("tests.jobs.add", JobSpec(args=[1, 2])).job
    ids = schedule_many("tests.jobs.add", [JobSpec(args=(3, 4)), JobSpec(kwargs={"a": 5, "b": 6})])
    assert first.args == [1, 2]
    rows = {row.pk: (row.args, row.kwargs) for row in Job.objects.filter(pk__in=ids)}
    assert [rows[i] for i in ids] == [([3, 4], {}), ([], {"a": 5, "b": 6})]


@pytest.mark.parametrize(("items", "message"), [
    (lambda: [5], r"schedule_many takes JobSpec objects: item 0 is 5 \(int\)"),
    (lambda: [JobSpec(args=(1, 2)), (1, 2)], r"item 1 is \(1, 2\) \(tuple\)"),
    (lambda: (JobSpec(args=(1, 2)), None), r"item 1 is None \(NoneType\)"),
    (lambda: (x for x in [JobSpec(args=(1, 2)), {"args": [1]}]),
     r"item 1 is \{'args': \[1\]\} \(dict\)"),
    (lambda: "ab", r"item 0 is 'a' \(str\)"),
    (lambda: 5, r"schedule_many takes an iterable of JobSpec objects, not 5 \(int\)"),
    (lambda: JobSpec(args=(1, 2)), r"an iterable of JobSpec objects, not JobSpec\(queue=None.* \(JobSpec\)"),
])
def test_schedule_many_names_an_item_that_is_not_a_spec(delayq_settings, items, message) -> None:  # type: ignore[no-untyped-def]
    """On the batch path and on the path of schedule() (``after=``) alike."""
    with pytest.raises(InvalidJob, match=message):
        schedule_many("tests.jobs.add", items())
    with pytest.raises(InvalidJob, match=message):
        schedule_many("tests.jobs.add", items(), after=[])
    assert not Job.objects.exists()


def test_schedule_spec_names_a_spec_that_is_not_one(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=r"schedule_spec takes a JobSpec, not \[1, 2\] \(list\)"):
        schedule_spec("tests.jobs.add", [1, 2])  # type: ignore[arg-type]
