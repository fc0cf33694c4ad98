"""The queues page pauses, resumes and purges one group, behind the queue permissions, and
sets or lifts its limits behind their own, each written to the admin's log
(docs/groups.md)."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from django_delayq import GroupOverride, group_limits, paused_groups, schedule
from django_delayq.models import Job, JobStatus
from tests.helpers import staff_client

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/admin/django_delayq/job/queues/"


def test_a_group_is_paused_resumed_and_purged_from_the_queues_page(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    acme = schedule("tests.jobs.noop", group="acme", delay=3600)
    client = staff_client("pause_queue", "purge_queue")
    client.post(PAGE, {"queue": "default", "group": "acme", "op": "pause"})
    assert paused_groups("default") == ["acme"]
    assert "default: paused groups acme" in client.get(PAGE).content.decode()
    client.post(PAGE, {"queue": "default", "group": "acme", "op": "resume"})
    assert paused_groups("default") == []
    client.post(PAGE, {"queue": "default", "group": "acme", "op": "purge"})  # no confirm
    assert Job.objects.get(pk=acme.id).status == JobStatus.SCHEDULED
    client.post(PAGE, {"queue": "default", "group": "acme", "op": "purge", "confirm": "yes"})
    assert Job.objects.get(pk=acme.id).status == JobStatus.CANCELLED
    logged = list(LogEntry.objects.order_by("pk").values_list("change_message", flat=True))
    assert logged == ["Paused group acme of queue default.",
                      "Resumed group acme of queue default.",
                      "Purged group acme of queue default: 1 waiting jobs cancelled."]


def test_a_blank_group_is_refused_not_taken_for_the_whole_queue(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    other = schedule("tests.jobs.noop", delay=3600)  # a job of the queue, of no group
    client = staff_client("pause_queue", "purge_queue")
    page = client.post(PAGE, {"queue": "default", "group": "", "op": "purge",
                              "confirm": "yes"}, follow=True).content.decode()
    assert "group must be a string of 1 to 128 characters, not &#x27;&#x27;" in page
    client.post(PAGE, {"queue": "default", "group": "", "op": "pause"})
    assert Job.objects.get(pk=other.id).status == JobStatus.SCHEDULED  # the group form's
    assert "Resume</button>" not in client.get(PAGE).content.decode()  # blank: nothing done
    assert not LogEntry.objects.exists()


def test_a_group_is_taken_as_typed_spaces_included(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """A group id may hold spaces (as in ``schedule()`` and ``delayq_queue``): the page
    acts on that group, never on the whole queue."""
    other = schedule("tests.jobs.noop", delay=3600)
    spaced = schedule("tests.jobs.noop", group="  ", delay=3600)
    client = staff_client("pause_queue", "purge_queue")
    page = client.post(PAGE, {"queue": "default", "group": "  ", "op": "purge"},
                       follow=True).content.decode()
    assert "Tick the box to confirm purging group &#x27;  &#x27; of default." in page
    client.post(PAGE, {"queue": "default", "group": "  ", "op": "purge", "confirm": "yes"})
    assert Job.objects.get(pk=spaced.id).status == JobStatus.CANCELLED
    assert Job.objects.get(pk=other.id).status == JobStatus.SCHEDULED


def test_group_controls_need_the_queue_permissions(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    client = staff_client()
    assert client.post(PAGE, {"queue": "default", "group": "acme", "op": "pause"}
                       ).status_code == 403
    assert paused_groups("default") == []


def test_a_group_limit_is_set_and_lifted_from_the_queues_page(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    client = staff_client("change_grouplimit")
    client.post(PAGE, {"queue": "default", "group": "acme", "op": "limit", "concurrency": "3",
                       "rate_limit": "10/s"})
    assert group_limits("default") == [GroupOverride(queue="default", group="acme",
                                                     concurrency=3, rate_limit="10/s")]
    assert "acme: concurrency 3, rate 10/s" in client.get(PAGE).content.decode()
    page = client.post(PAGE, {"queue": "default", "group": "acme", "op": "limit",
                              "concurrency": "-2"}, follow=True).content.decode()
    assert "concurrency must be an integer &gt;= 1, not &#x27;-2&#x27;" in page
    page = client.post(PAGE, {"queue": "default", "group": "acme", "op": "limit",
                              "concurrency": "0"}, follow=True).content.decode()
    assert "concurrency must be an integer &gt;= 1, not 0" in page
    for bad, shown in (("99999999999999999999", "at most 2147483647, not 99999999999999999999"),
                       ("\u00b2", "not &#x27;\u00b2&#x27;")):  # "²" is a digit to isdigit()
        page = client.post(PAGE, {"queue": "default", "group": "acme", "op": "limit",
                                  "concurrency": bad}, follow=True).content.decode()
        assert shown in page
    assert group_limits("default")[0].concurrency == 3
    client.post(PAGE, {"queue": "default", "group": "acme", "op": "unlimit"})
    assert group_limits("default") == []
    logged = list(LogEntry.objects.order_by("pk").values_list("change_message", flat=True))
    assert logged == ["Limited group acme of queue default: concurrency 3, rate 10/s.",
                      "Group acme of queue default back to the queue's group limits."]


def test_group_limits_need_their_permission(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    client = staff_client("pause_queue", "purge_queue")
    assert client.post(PAGE, {"queue": "default", "group": "acme", "op": "limit",
                              "concurrency": "3"}).status_code == 403
    assert group_limits("default") == []
