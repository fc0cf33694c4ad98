"""``delayq_status`` shows the groups with the most due jobs, their running jobs, their
limits and whether they are paused or held (observe/redis_state.py)."""

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
    assert "due 3, running 0, limit 1 at once, held by its limit" in out.getvalue()  # rows


def test_status_shows_each_groups_own_limits_else_its_queues(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import set_group_limit

    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "QUEUE_OPTIONS": {
        "default": {"group_concurrency": 3, "group_rate_limit": "10/s"}}}
    set_group_limit("default", "acme", concurrency=1)
    set_group_limit("default", "bob", rate_limit="5/m")
    for g in ("acme", "bob", "carol"):
        schedule("tests.jobs.noop", group=g)
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    limits = {g["group"]: g["limit"] for g in json.loads(out.getvalue())["groups"]}
    assert limits == {"acme": "10/s, 1 at once", "bob": "5/m, 3 at once",
                      "carol": "10/s, 3 at once"}
