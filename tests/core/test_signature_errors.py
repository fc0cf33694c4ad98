"""What ``chain()``, ``group()`` and ``schedule_many()`` say about bad input: anything
that is not an iterable of signatures is an ``InvalidJob`` naming it (never a
``TypeError``), and a bad piece among many is named by its position and a short form of
its arguments (docs/workflows.md, "Signatures, chain and group")."""

from __future__ import annotations

import pytest

from django_delayq import InvalidJob
from django_delayq.core.api import JobSpec, chain, group, job, schedule_many
from django_delayq.models import Job
from tests import jobs
from tests.helpers import point_at

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server)


@pytest.mark.parametrize(("pieces", "named"), [
    (None, "not None (NoneType)"), (5, "not 5 (int)"), ("abc", "not 'abc' (str)"),
    (b"ab", "not b'ab' (bytes)")])
def test_group_refuses_what_is_no_iterable_of_signatures(dq, pieces, named) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match="group\\(\\) takes an iterable of .*; %s"
                       % named.replace("(", "\\(").replace(")", "\\)")):
        group(pieces)


def test_group_given_one_signature_says_to_wrap_it(dq) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=r"not one signature: group\(\[sig\]\)"):
        group(job(jobs.add).s(1, 2))  # type: ignore[arg-type]
    assert not Job.objects.exists()


def test_a_piece_that_is_not_a_signature_is_named_by_its_position(dq) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=r"group\(\) item 2 is \[1, 2\] \(list\)"):
        group([job(jobs.add).s(1, 2), job(jobs.add).s(3, 4), [1, 2]])  # type: ignore[list-item]
    with pytest.raises(InvalidJob, match=r"chain\(\) item 1 is 'oops' \(str\)"):
        chain(job(jobs.noop).s(), "oops")  # type: ignore[arg-type]


GOOD = [(i, i) for i in range(1000)]
DETAIL = r": the arguments do not match tests\.jobs\.add\(a, b\): too many positional"


def test_group_names_the_piece_whose_arguments_do_not_match(dq) -> None:  # type: ignore[no-untyped-def]
    add = job(jobs.add)
    pieces = [add.s(*a) for a in GOOD[:700]] + [add.s(1, 2, 3)] + [add.s(*a) for a in GOOD[700:]]
    with pytest.raises(InvalidJob, match=r"group\(\) item 700 \(args \(1, 2, 3\)\)" + DETAIL):
        group(pieces)
    lone = [job(jobs.noop).s(), add.s(4, 5, 6)]  # a run of one piece: scheduled alone
    with pytest.raises(InvalidJob, match=r"group\(\) item 1 \(args \(4, 5, 6\)\)" + DETAIL):
        group(lone)
    with pytest.raises(InvalidJob, match=r"group\(then=\.\.\.\) \(args \(7, 8, 9\)\)" + DETAIL):
        group([add.s(1, 2)], then=add.s(7, 8, 9))
    assert not Job.objects.exists()


def test_chain_names_the_piece_too(dq) -> None:  # type: ignore[no-untyped-def]
    add = job(jobs.add)
    with pytest.raises(InvalidJob, match=r"chain\(\) item 2 \(args \(1, 2, 3\)\)" + DETAIL):
        chain(add.s(1, 2), add.s(3, 4), add.s(1, 2, 3))
    assert not Job.objects.exists()


@pytest.mark.parametrize("alone", [False, True])
def test_schedule_many_names_the_spec(dq, alone) -> None:  # type: ignore[no-untyped-def]
    specs = [JobSpec(args=a) for a in GOOD]
    specs[998] = JobSpec(args=(1, 2, 3), kwargs={"x": 1})
    if alone:  # one spec of its own queue: the others in bulk, it alone
        specs[5] = JobSpec(args=(5, 5), queue="emails")
    with pytest.raises(InvalidJob, match=r"schedule_many item 998 \(args \(1, 2, 3\), "
                       r"kwargs \{'x': 1\}\): the arguments do not match"):
        schedule_many(jobs.add, specs)
    specs[998] = JobSpec(args=(1, 2))
    specs[3] = JobSpec(args=(1, 2, 3), queue="emails")
    with pytest.raises(InvalidJob, match=r"schedule_many item 3 \(args \(1, 2, 3\)\)" + DETAIL):
        schedule_many(jobs.add, specs)
    assert not Job.objects.exists()
