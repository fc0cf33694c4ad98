"""Inputs no database can take end in clean errors naming the value, escaped: a job id
with a lone surrogate or NUL is not found (it raised UnicodeEncodeError / the driver's
error), a key with a control character is refused (PostgreSQL cannot store NUL), and
``at`` is capped at 100 years ahead, as ``delay`` is."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from django_delayq import (
    InvalidJob,
    JobNotFound,
    JobSpec,
    cancel,
    get_job,
    requeue,
    reschedule,
    run_now,
    schedule,
    schedule_many,
)
from django_delayq.core import results
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
