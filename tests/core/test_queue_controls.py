"""Queue controls: pause_queue / resume_queue / paused_queues / purge_queue, the one
control the admin and the command perform (``core.queue_controls``), and
``manage.py delayq_queue`` (exit codes 0, 1, 2), on a real Redis with a real worker."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

import django_delayq
from django_delayq import InvalidJob, pause_queue, paused_queues, purge_queue, resume_queue
from django_delayq.core.api import JobSpec, schedule, schedule_many
from django_delayq.core.connection import get_engine
from django_delayq.core.group_limits import GroupOverride
from django_delayq.core.queue_controls import Control, control
from django_delayq.management.commands.delayq_queue import rate_text
from django_delayq.models import Job, JobStatus
from tests import jobs
from tests.helpers import burst, point_at

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server,
             QUEUE_OPTIONS={"emails": {"rate_limit": "100/m", "concurrency": 5, "timeout": 30}})
    return get_engine()


def statuses(ids: list[str]) -> list[str]:
    by_id = dict(Job.objects.filter(pk__in=ids).values_list("id", "status"))
    return [by_id[i] for i in ids]


def test_a_paused_queue_accepts_jobs_keeps_due_times_and_runs_them_after_resume(dq) -> None:  # type: ignore[no-untyped-def]
    assert pause_queue("default") is True
    assert pause_queue("default") is False  # already paused
    assert paused_queues() == ["default"]
    due = timezone.now() - dt.timedelta(seconds=1)
    h = schedule(jobs.add, 1, 2, at=due)
    other = schedule(jobs.add, 3, 4, queue="emails")
    assert dq.inspect("default", h.id).score_ms == int(due.timestamp() * 1000)
    assert burst(queues=("default", "emails")) == 0
    assert statuses([h.id, other.id]) == [JobStatus.SCHEDULED, JobStatus.SUCCEEDED]
    assert resume_queue("default") is True
    assert resume_queue("default") is False
    assert paused_queues() == []
    assert burst(queues=("default",)) == 0
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.result) == (JobStatus.SUCCEEDED, 3)
    assert row.lateness_ms() >= 1000  # late since its due time, not since the resume


def test_unknown_queues_are_refused_by_name(dq) -> None:  # type: ignore[no-untyped-def]
    for each in (pause_queue, resume_queue, purge_queue):
        with pytest.raises(InvalidJob, match="unknown queue 'nope'"):
            each("nope")
    assert paused_queues() == []


def test_one_control_of_a_queue_or_group_says_what_it_did(dq) -> None:  # type: ignore[no-untyped-def]
    """``core.queue_controls.control``: what the queues page and delayq_queue perform."""
    assert control("pause", "default") == Control(changed=True)
    assert control("pause", "default") == Control(changed=False)
    assert control("resume", "default") == Control(changed=True)
    assert control("resume", "default", "acme") == Control(changed=False)  # a group's
    schedule(jobs.noop, delay=3600)
    schedule(jobs.noop, group="acme", delay=3600)
    assert control("purge", "default", "acme") == Control(changed=True, removed=1)
    assert control("purge", "default") == Control(changed=True, removed=1, ticks_kept=0)
    assert control("limit", "default", "acme", concurrency=2) == Control(
        changed=True, limits=GroupOverride(queue="default", group="acme", concurrency=2))
    assert control("unlimit", "default", "acme") == Control(changed=True)
    for op, group, message in (("limit", None, "group must be a string"),
                               ("unlimit", "", "group must be a string"),
                               ("drain", None, "unknown control 'drain'")):
        with pytest.raises(InvalidJob, match=message):
            control(op, "default", group)


def test_purge_cancels_the_waiting_jobs_rows_in_batches_and_leaves_running_ones(dq) -> None:  # type: ignore[no-untyped-def]
    ids = schedule_many(jobs.noop, [JobSpec(delay=i % 3) for i in range(450)])
    [running] = dq.claim("default", 1, 60_000, now_ms=10**14).jobs  # in flight: not purged
    kept = schedule(jobs.noop, queue="emails").id
    assert purge_queue("default") == 449
    rows = Job.objects.filter(pk__in=ids).exclude(pk=running.id)
    assert rows.count() == 449
    assert set(rows.values_list("status", "last_error")) == {
        (JobStatus.CANCELLED, "purged from queue default")}
    assert all(r.finished_at is not None for r in rows)
    assert Job.objects.get(pk=running.id).status == JobStatus.SCHEDULED
    assert dq.inspect("default", running.id).place == "inflight"
    st = dq.stats("default")
    assert (st.scheduled, st.ready, st.inflight) == (0, 0, 1)
    assert Job.objects.get(pk=kept).status == JobStatus.SCHEDULED
    assert purge_queue("default") == 0


def test_controls_are_exported_from_the_package() -> None:
    for name in ("pause_queue", "resume_queue", "paused_queues", "purge_queue"):
        assert name in django_delayq.__all__
        assert getattr(django_delayq, name).__module__ == "django_delayq.core.queues"


# -- manage.py delayq_queue --------------------------------------------------------------

def run(*args: str) -> str:
    out = StringIO()
    call_command("delayq_queue", *args, stdout=out)
    return out.getvalue()


def test_command_pauses_resumes_and_lists_state_and_limits(dq) -> None:  # type: ignore[no-untyped-def]
    assert run("pause", "emails", "slow") == "emails: paused\nslow: paused\n"
    assert run("pause", "emails") == "emails: already paused\n"
    schedule(jobs.noop, queue="emails")
    lines = run("list").splitlines()
    assert lines[0].split() == ["queue", "state", "due", "now", "scheduled", "in", "flight",
                                "dead", "rate", "concurrency", "timeout"]
    table = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert table["emails"] == ["paused", "1", "0", "0", "0", "100/m", "5", "30s"]
    assert table["default"] == ["active", "0", "0", "0", "0", "-", "-", "-"]
    assert table["slow"][0] == "paused"
    assert run("resume", "emails") == "emails: resumed\n"
    assert paused_queues() == ["slow"]


def test_command_purge_needs_yes(dq) -> None:  # type: ignore[no-untyped-def]
    ids = schedule_many(jobs.noop, [JobSpec() for _ in range(3)])
    with pytest.raises(CommandError, match="--yes") as refused:
        run("purge", "default")
    assert refused.value.returncode == 2
    assert statuses(ids) == [JobStatus.SCHEDULED] * 3
    assert run("purge", "default", "--yes") == (
        "default: purged 3 waiting job(s); their rows are cancelled; kept 0 schedule "
        "tick(s) waiting\n")
    assert statuses(ids) == [JobStatus.CANCELLED] * 3


@pytest.mark.parametrize("args, message", [
    (("pause", "nope"), "unknown queue(s) nope"),
    (("resume",), "resume needs at least one queue"),
])
def test_command_usage_errors_exit_2(dq, args, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        run(*args)
    assert e.value.returncode == 2


def test_command_exits_1_when_redis_is_unavailable(settings, dq) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    with pytest.raises(CommandError, match="Redis is unavailable") as e:
        run("pause", "default")
    assert e.value.returncode == 1


@pytest.mark.parametrize("rate, text", [((10, 1000), "10/s"), ((5, 10_000), "5/10s"),
                                        ((100, 60_000), "100/m"), ((3, 7_200_000), "3/2h"),
                                        (None, "-")])
def test_rates_are_shown_as_configured(rate, text) -> None:  # type: ignore[no-untyped-def]
    assert rate_text(rate) == text
