"""Inputs no database can take end in clean errors naming the value, escaped: a job id
with a lone surrogate or NUL is not found (it raised UnicodeEncodeError / the driver's
error), a key with a control character is refused (PostgreSQL cannot store NUL), a lone
surrogate in ``after=`` or any other string option is refused by every way in, and ``at``
is capped at 100 years ahead, as ``delay`` is."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from django_delayq import (
    InvalidJob,
    JobNotFound,
    JobSpec,
    cancel,
    chain,
    get_job,
    job,
    requeue,
    reschedule,
    run_now,
    schedule,
    schedule_many,
    schedule_spec,
)
from django_delayq.core import results
from django_delayq.core.aio import aschedule, aschedule_spec
from django_delayq.core.api import JobCall, JobHandle
from django_delayq.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(("bad", "shown"), [("\ud800", r"'\ud800'"), ("a\x00b", r"'a\x00b'"),
                                            (17, "17")])
def test_an_id_no_row_can_have_is_not_found(delayq_settings, bad, shown) -> None:  # type: ignore[no-untyped-def]
    for call in (cancel, get_job, run_now, requeue, lambda i: reschedule(i, delay=5),
                 lambda i: results.wait(i, timeout=1)):
        with pytest.raises(JobNotFound) as info:
            call(bad)
        assert str(info.value) == "no job with id %s" % shown


def test_a_handle_given_for_an_id_is_named_with_a_hint(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    handle = schedule("tests.jobs.noop", delay=60)
    with pytest.raises(JobNotFound, match=r"no job with id JobHandle\(.*\); pass its \.id$"):
        cancel(handle)  # type: ignore[arg-type]
    assert Job.objects.get(pk=handle.id).status == "scheduled"


@pytest.mark.parametrize(("key", "shown"), [("a\x00b", r"'a\x00b'"), ("line\nbreak", r"'line\nbreak'"),
                                            ("esc\x1b[31m", r"'esc\x1b[31m'"), ("c1\x85", r"'c1\x85'")])
def test_a_key_with_a_control_character_is_refused(delayq_settings, key, shown) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob) as info:
        schedule("tests.jobs.noop", key=key)
    assert str(info.value).startswith("key %s contains control characters" % shown)
    with pytest.raises(InvalidJob, match="contains control characters"):
        schedule_many("tests.jobs.noop", [JobSpec(key=key)])
    assert not Job.objects.exists()


def test_printable_keys_stay_accepted(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    for key in ("order 17", "caf\u00e9", "\u00a0nbsp", "tab-free:\u2603"):
        assert Job.objects.get(pk=schedule("tests.jobs.noop", key=key, delay=60).id).key == key


def test_at_is_capped_at_100_years_like_delay(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    far = datetime(9999, 1, 1, tzinfo=UTC)
    message = re.escape("at=9999-01-01T00:00:00+00:00 is more than 100 years from now")
    with pytest.raises(InvalidJob, match=message):
        schedule("tests.jobs.noop", at=far)
    with pytest.raises(InvalidJob, match=message):
        schedule_many("tests.jobs.noop", [JobSpec(at=far)])
    h = schedule("tests.jobs.noop", at=timezone.now() + timedelta(days=365 * 99))
    with pytest.raises(InvalidJob, match=message):
        reschedule(h.id, at=far)
    with pytest.raises(InvalidJob, match="expires=9999-01-01T00:00:00"):
        schedule("tests.jobs.noop", expires=far)


SURROGATE_AFTER = ["01j\ud800", "\udfff"]  # no database stores these as UTF-8


@pytest.mark.parametrize("bad", SURROGATE_AFTER)
def test_a_lone_surrogate_in_after_is_refused_by_every_way_in(delayq_settings, bad) -> None:  # type: ignore[no-untyped-def]
    """``after=`` an id with a lone surrogate reached the database's driver, which raised
    ``UnicodeEncodeError``; ``job(fn).using(after=...)`` took it. Now ``InvalidJob``
    naming it, as for NUL, before anything is written."""
    add = "tests.jobs.add"
    ways = {
        "schedule": lambda: schedule(add, 1, 2, after=[bad]),
        "schedule, one id": lambda: schedule(add, 1, 2, after=bad),
        "schedule, a handle": lambda: schedule(add, 1, 2, after=[JobHandle(bad, "default")]),
        "schedule_many": lambda: schedule_many(add, [JobSpec(args=(1, 2))], after=[bad]),
        "schedule_many, a spec's": lambda: schedule_many(
            add, [JobSpec(args=(1, 2)), JobSpec(args=(3, 4), after=[bad])]),
        "schedule_spec": lambda: schedule_spec(add, JobSpec(args=(1, 2), after=[bad])),
        "job().using()": lambda: job(add).using(after=[bad]),
        "job().schedule_many": lambda: JobCall(add, after=bad).schedule_many(
            [JobSpec(args=(1, 2))]),
        "chain": lambda: chain(job(add).s(1, 2), JobCall(add, after=[bad]).s(3, 4)),
        "aschedule": lambda: asyncio.run(aschedule(add, 1, 2, after=[bad])),
        "aschedule_spec": lambda: asyncio.run(aschedule_spec(add, JobSpec(args=(1, 2),
                                                                          after=[bad]))),
    }
    for way, call in ways.items():
        with pytest.raises(InvalidJob) as info:
            call()
        named = JobHandle(bad, "default") if "handle" in way else bad
        at = {"chain": "chain() item 1 (args (3, 4)): ",  # one piece's, named
              "schedule_many, a spec's": "schedule_many item 1 (args (3, 4)): "}.get(way, "")
        assert str(info.value) == at + "after= takes JobHandle objects or job ids; got %r" % (
            named,), way
        assert not Job.objects.exists(), way


@pytest.mark.parametrize(("option", "named"), [
    ({"key": "k\ud800"}, r"key 'k\\ud800' contains a lone surrogate"),
    ({"group": "g\ud800"}, r"group 'g\\ud800' contains a lone surrogate"),
    ({"queue": "q\ud800"}, r"unknown queue 'q\\ud800'"),
    ({"retry_on": "builtins.Value\ud800Error"}, r"retry_on: 'builtins.Value\\ud800Error' is not"),
    ({"retry_on": ["builtins.Value\ud800Error"]}, r"retry_on: 'builtins.Value\\ud800Error' is not"),
    ({"key": "k", "on_conflict": "keep\ud800"}, r"on_conflict='keep\\ud800'"),
    ({"after": [], "after_failure": "run\ud800"}, r"after_failure='run\\ud800'"),
])
def test_a_lone_surrogate_in_a_string_option_is_refused_by_every_way_in(delayq_settings, option, named) -> None:  # type: ignore[no-untyped-def]
    """Each string option a row or Redis stores: ``InvalidJob`` naming it, escaped, never a
    driver's ``UnicodeEncodeError``; ``using()`` refuses it at once."""
    add = "tests.jobs.add"
    for call in (lambda: schedule(add, 1, 2, **option),
                 lambda: schedule_spec(add, JobSpec(args=(1, 2), **option)),
                 lambda: schedule_many(add, [JobSpec(args=(1, 2), **option)]),
                 lambda: job(add).using(**option)):
        with pytest.raises(InvalidJob, match=named):
            call()
    assert not Job.objects.exists()
