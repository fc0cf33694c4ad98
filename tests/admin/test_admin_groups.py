"""The admin's job list filters by group: the groups with the most live jobs as links,
any group by ``?group=`` (docs/groups.md)."""

from __future__ import annotations

import pytest

from django_delayq import schedule
from tests.helpers import staff_client

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_job_list_filters_by_group(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    acme = [schedule("tests.jobs.noop", i, group="acme", delay=3600) for i in range(2)]
    bob = schedule("tests.jobs.noop", group="bob", delay=3600)
    plain = schedule("tests.jobs.noop", delay=3600)
    client = staff_client()
    page = client.get("/admin/django_delayq/job/").content.decode()
    assert "?group=acme" in page and "?group=bob" in page
    page = client.get("/admin/django_delayq/job/?group=acme").content.decode()
    assert all(h.id in page for h in acme) and bob.id not in page and plain.id not in page


def test_the_dashboard_data_has_the_busiest_groups(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    for i in range(2):
        schedule("tests.jobs.noop", i, group="acme")
    schedule("tests.jobs.noop", group="bob")
    data = staff_client().get("/admin/django_delayq/job/dashboard/data/").json()
    assert [(g["queue"], g["group"], g["due"], g["running"], g["paused"])
            for g in data["groups"]] == [("default", "acme", 2, 0, False),
                                         ("default", "bob", 1, 0, False)]


def test_the_job_list_filters_by_a_group_with_no_live_job(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """A finished tenant's jobs: no live job lists its group, ``?group=`` still filters."""
    from django_delayq.models import Job, JobStatus
    done = schedule("tests.jobs.noop", group="gone-tenant", delay=3600)
    other = schedule("tests.jobs.noop", group="acme-done", delay=3600)
    Job.objects.filter(pk__in=[done.id, other.id]).update(status=JobStatus.DEAD)
    client = staff_client()
    page = client.get("/admin/django_delayq/job/?group=gone-tenant").content.decode()
    assert done.id in page and other.id not in page
    page = client.get("/admin/django_delayq/job/?group=%3Cb%3Ex").content.decode()
    assert done.id not in page and "<b>x" not in page  # none of that group; escaped
