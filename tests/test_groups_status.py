"""``delayq_status`` shows the groups with the most due jobs, their running jobs and
whether they are paused (observe/group_usage.py)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_delayq import pause_group, schedule
from django_delayq.models import Job, JobStatus

pytestmark = pytest.mark.django_db(transaction=True)


def test_status_names_the_busiest_groups(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    for i in range(3):
        schedule("tests.jobs.noop", i, group="acme")
    bob = schedule("tests.jobs.noop", group="bob")
    schedule("tests.jobs.noop", group="later", delay=3600)  # not due
    Job.objects.filter(pk=bob.id).update(status=JobStatus.RUNNING)
    schedule("tests.jobs.noop", group="bob")
    pause_group("default", "bob")
    out = StringIO()
    call_command("delayq_status", stdout=out)
    text = out.getvalue()
    assert "GROUPS (most due jobs)" in text
    assert text.index("acme") < text.index("bob")
    assert "due 3, running 0" in text and "due 1, running 1, paused" in text
    assert "later" not in text
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    groups = json.loads(out.getvalue())["groups"]
    assert [(g["group"], g["due"], g["running"], g["paused"]) for g in groups] == [
        ("acme", 3, 0, False), ("bob", 1, 1, True)]


def test_status_names_a_group_its_limit_holds_back(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import set_group_limit

    set_group_limit("default", "acme", concurrency=1)
    for i in range(3):
        schedule("tests.jobs.noop", i, group="acme")
    assert len(delayq_engine.claim("default", 10, 60_000).jobs) == 1  # acme now held
    out = StringIO()
    call_command("delayq_status", stdout=out)
    assert "due 3, running 0, held by its limit" in out.getvalue()  # rows: no worker wrote
