"""Pausing, resuming and purging one group from the API and ``delayq_queue ... --group``:
the queue's other jobs still run, the group's wait or go, names are checked."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_delayq import (
    InvalidJob,
    pause_group,
    paused_groups,
    purge_group,
    resume_group,
    schedule,
)
from django_delayq.models import Job, JobStatus
from django_delayq.testing import run_due_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def status(handle) -> str:  # type: ignore[no-untyped-def]
    return Job.objects.get(pk=handle.id).status


def test_a_paused_group_waits_while_the_queue_runs(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    assert pause_group("default", "acme") and paused_groups("default") == ["acme"]
    acme, bob = schedule("tests.jobs.noop", group="acme"), schedule("tests.jobs.noop", group="bob")
    plain = schedule("tests.jobs.noop")
    run_due_jobs()
    assert (status(acme), status(bob), status(plain)) == (
        JobStatus.SCHEDULED, JobStatus.SUCCEEDED, JobStatus.SUCCEEDED)
    assert resume_group("default", "acme") and paused_groups("default") == []
    run_due_jobs()
    assert status(acme) == JobStatus.SUCCEEDED


def test_names_are_checked(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match="nowhere"):
        pause_group("nowhere", "acme")
    with pytest.raises(InvalidJob, match="group"):
        pause_group("default", "a\nb")


def test_the_command_pauses_lists_and_resumes_a_group(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    out = StringIO()
    call_command("delayq_queue", "pause", "default", "--group", "acme", stdout=out)
    call_command("delayq_queue", "list", "default", stdout=out)
    call_command("delayq_queue", "resume", "default", "--group", "acme", stdout=out)
    text = out.getvalue()
    assert "default: group acme paused" in text and "default: paused groups: acme" in text
    assert "default: group acme resumed" in text
    with pytest.raises(CommandError, match="pause, resume and purge"):
        call_command("delayq_queue", "list", "default", "--group", "acme")


def test_the_command_lists_a_paused_group_written_by_hand_escaped(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    delayq_engine.client.sadd(delayq_engine.keys("default").group_paused, "\x1b[2Jevil")
    out = StringIO()
    call_command("delayq_queue", "list", "default", stdout=out)
    assert "default: paused groups: \\x1b[2Jevil" in out.getvalue()  # no terminal escape


def test_purging_a_group_cancels_its_waiting_jobs_only(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    acme = [schedule("tests.jobs.noop", i, group="acme", delay=3600) for i in range(3)]
    bob = schedule("tests.jobs.noop", group="bob", delay=3600)
    out = StringIO()
    call_command("delayq_queue", "purge", "default", "--group", "acme", "--yes", stdout=out)
    assert "default: group acme purged: 3 waiting job(s)" in out.getvalue()
    rows = Job.objects.filter(pk__in=[h.id for h in acme])
    assert {(r.status, r.last_error) for r in rows} == {
        (JobStatus.CANCELLED, "purged from group acme of queue default")}
    assert [delayq_engine.inspect("default", h.id).place for h in acme] == ["", "", ""]
    assert status(bob) == JobStatus.SCHEDULED and paused_groups("default") == []
    assert purge_group("default", "acme") == 0
