"""Each lifecycle signal is sent with its documented arguments (docs/signals.md), by the
api and by a real burst worker (its own threads, the batched settler)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_delayq import cancel, schedule, signals
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt
from django_delayq.testing import run_worker
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.housekeeping import LeaseRecovery
from tests.helpers import signals_sent

pytestmark = pytest.mark.django_db(transaction=True)

NAMES = ("job_scheduled", "job_started", "job_succeeded", "job_retrying", "job_dead",
         "job_cancelled")
COMMON = {"signal", "sender", "job_id", "queue", "callable_path"}
DOCUMENTED = {
    "job_scheduled": COMMON | {"run_at"},
    "job_started": COMMON | {"attempt", "worker_id", "due_at", "started_at"},
    "job_succeeded": COMMON | {"attempt", "worker_id", "result", "duration"},
    "job_retrying": COMMON | {"attempt", "worker_id", "error", "error_type", "started_at",
                              "retry_at"},
    "job_dead": COMMON | {"attempt", "worker_id", "error", "error_type", "started_at"},
    "job_cancelled": COMMON | {"running"},
}


@pytest.fixture
def sent(delayq_settings) -> Iterator[list[tuple[str, dict[str, Any]]]]:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ,
                              "ALLOWED_CALLABLES": ["tests.jobs", "tests.jobs_tasks"]}
    # tests.jobs_tasks also defines @task functions, validated at import by this backend
    delayq_settings.TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQBackend"}}
    with signals_sent(*NAMES) as log:
        yield log


def _only(log: list[tuple[str, dict[str, Any]]], name: str) -> list[dict[str, Any]]:
    found = [kw for n, kw in log if n == name]
    for kw in found:
        assert set(kw) == DOCUMENTED[name], (name, sorted(kw))
        assert kw["sender"] is Job
    return found


def _aware(value: Any) -> bool:
    return isinstance(value, datetime) and timezone.is_aware(value)


def test_schedule_sends_job_scheduled(sent):
    handle = schedule("tests.jobs.add", 1, 2, delay=timedelta(minutes=5), queue="emails")
    (kw,) = _only(sent, "job_scheduled")
    assert (kw["job_id"], kw["queue"], kw["callable_path"]) == (handle.id, "emails",
                                                                "tests.jobs.add")
    assert _aware(kw["run_at"]) and kw["run_at"] == Job.objects.get(pk=handle.id).run_at


def test_cancel_of_a_pending_job_sends_job_cancelled_not_running(sent):
    handle = schedule("tests.jobs.add", 1, 2, delay=60)
    cancel(handle.id)
    (kw,) = _only(sent, "job_cancelled")
    assert (kw["job_id"], kw["running"], kw["callable_path"]) == (handle.id, False,
                                                                  "tests.jobs.add")


def test_worker_sends_started_then_succeeded(sent):
    handle = schedule("tests.jobs.add", 2, 3)
    assert run_worker() == 1
    (started,) = _only(sent, "job_started")
    (done,) = _only(sent, "job_succeeded")
    assert [n for n, _ in sent] == ["job_scheduled", "job_started", "job_succeeded"]
    assert started["job_id"] == done["job_id"] == handle.id
    assert started["attempt"] == done["attempt"] == 1
    assert started["worker_id"] == done["worker_id"] == Job.objects.get(pk=handle.id).worker_id
    assert _aware(started["due_at"]) and _aware(started["started_at"])
    assert started["started_at"] >= started["due_at"] - timedelta(milliseconds=5)
    assert done["result"] == 5
    assert isinstance(done["duration"], float) and done["duration"] >= 0


def returns_a_tuple() -> tuple[dict[int, str], tuple[int, int]]:
    """A job whose return value is not the JSON value its row stores."""
    return {3: "three"}, (1, 2)


def test_job_succeeded_sends_the_json_value_the_row_stores(sent, delayq_settings):
    """``result`` is the JSON value (docs/signals.md), as ``Job.result`` and
    ``handle.result`` read it: a tuple is a list, a dict's keys are strings."""
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "ALLOWED_CALLABLES": [
        *delayq_settings.DELAYQ["ALLOWED_CALLABLES"], "tests.test_signals"]}
    handle = schedule("tests.test_signals.returns_a_tuple")
    assert run_worker() == 1
    (done,) = _only(sent, "job_succeeded")
    assert done["result"] == [{"3": "three"}, [1, 2]] == handle.result
    assert Job.objects.get(pk=handle.id).result == done["result"]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "EAGER": True}  # run by schedule()
    eager = schedule("tests.test_signals.returns_a_tuple")
    assert [kw["result"] for kw in _only(sent, "job_succeeded")] == [done["result"]] * 2
    assert eager.result == done["result"]


def test_worker_sends_retrying_then_dead(sent):
    handle = schedule("tests.jobs.boom", "kaput", max_attempts=2, backoff=[0])
    assert run_worker() == 2
    (retry,) = _only(sent, "job_retrying")
    (dead,) = _only(sent, "job_dead")
    assert [kw["attempt"] for kw in _only(sent, "job_started")] == [1, 2]
    assert (retry["job_id"], retry["attempt"], dead["attempt"]) == (handle.id, 1, 2)
    assert retry["error"] == dead["error"] == "kaput"
    assert retry["error_type"] == dead["error_type"] == "builtins.RuntimeError"
    assert _aware(retry["retry_at"])
    assert retry["worker_id"] == dead["worker_id"] != ""
    # each failed attempt's start, the one its JobAttempt row keeps
    assert [retry["started_at"], dead["started_at"]] == list(
        JobAttempt.objects.filter(job_id=handle.id).order_by("number")
        .values_list("started_at", flat=True))
    assert _aware(retry["started_at"]) and retry["started_at"] < dead["started_at"]


def test_recovery_sends_the_start_the_lost_attempt_wrote_on_its_row(sent):
    """A lost lease's ``job_retrying`` names no worker; its ``started_at`` is the start the
    lost attempt's worker wrote on the job's row (what its ``JobAttempt`` keeps)."""
    handle = schedule("tests.jobs.noop", max_attempts=3)
    engine = get_engine()
    claimed = engine.claim("default", 1, 50).jobs
    assert [j.id for j in claimed] == [handle.id]
    engine.mark_started(claimed)
    start = timezone.now() - timedelta(seconds=2)
    Job.objects.filter(pk=handle.id).update(attempts=1, started_at=start, worker_id="victim:1")
    recovery = LeaseRecovery(engine, get_settings(), AuditWriter())
    deadline = time.monotonic() + 10
    while not _only(sent, "job_retrying"):  # until the 50 ms lease is taken back
        assert time.monotonic() < deadline, "the lease was never taken back"
        time.sleep(0.02)
        recovery.recover("default")
    (retry,) = _only(sent, "job_retrying")
    assert (retry["job_id"], retry["worker_id"], retry["callable_path"]) == (handle.id, "", "")
    assert retry["started_at"] == start


def test_cancel_while_running_sends_job_cancelled_running(sent):
    handle = schedule("tests.jobs_tasks.cancel_self", max_attempts=3)
    assert run_worker() == 1  # cancelled while running: not retried
    found = _only(sent, "job_cancelled")
    assert found and all(kw["running"] is True and kw["job_id"] == handle.id for kw in found)
    assert _only(sent, "job_retrying") == [] and _only(sent, "job_dead") == []
    assert Job.objects.get(pk=handle.id).status == "cancelled"


def test_internal_observers_run_first_and_a_failing_one_affects_nobody(sent, caplog) -> None:  # type: ignore[no-untyped-def]
    """Metrics and the event stream observe the signals with plain calls; one that raises
    is logged, and the job, other observers and Django's receivers go on."""
    seen: list[tuple[str, Any]] = []

    def broken(**kwargs: Any) -> None:
        raise RuntimeError("observer bug")

    def good(sender: Any, **kwargs: Any) -> None:
        seen.append((kwargs["job_id"], sender))

    signals.observe(signals.job_scheduled, broken)
    signals.observe(signals.job_scheduled, good)
    signals.observe(signals.job_scheduled, good)  # idempotent
    try:
        h = schedule("tests.jobs.noop")
    finally:
        signals.unobserve(signals.job_scheduled, broken)
        signals.unobserve(signals.job_scheduled, good)
    assert seen == [(h.id, Job)]
    assert [kw["job_id"] for kw in _only(sent, "job_scheduled")] == [h.id]
    assert "observer bug" in caplog.text
    assert run_worker() == 1 and Job.objects.get(pk=h.id).status == "succeeded"


def test_bulk_scheduling_sends_one_signal_per_batch(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    from django_delayq.core.api import JobSpec, schedule_many

    got: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        got.append(kwargs)

    signals.jobs_scheduled.connect(receiver, weak=False)
    try:
        first = schedule_many("tests.jobs.add", [JobSpec(args=(i, 1), key="b%d" % i)
                                                 for i in range(3)], batch_size=2)
        again = schedule_many("tests.jobs.add", [JobSpec(args=(i, 1), key="b%d" % i)
                                                 for i in range(3)])
    finally:
        signals.jobs_scheduled.disconnect(receiver)
    assert first == again and len(got) == 1
    assert {k: v for k, v in got[0].items() if k != "signal"} == {
        "sender": Job, "queue": "default", "callable_path": "tests.jobs.add",
        "job_ids": first}


def test_schedule_many_sends_one_jobs_scheduled_for_its_batch_and_job_scheduled_per_spec_alone(sent):
    """A spec with its own queue or retries is scheduled as schedule() would (its
    ``job_scheduled``); the others stay one batch (one ``jobs_scheduled``)."""
    from django_delayq.core.api import JobSpec, schedule_many

    batches: list[list[str]] = []

    def receiver(job_ids: list[str], **kwargs: Any) -> None:
        batches.append(job_ids)

    signals.jobs_scheduled.connect(receiver, weak=False)
    try:
        ids = schedule_many("tests.jobs.add", [
            JobSpec(args=(1, 2)), JobSpec(args=(3, 4), queue="emails"), JobSpec(args=(5, 6)),
            JobSpec(args=(7, 8), max_attempts=2)])
    finally:
        signals.jobs_scheduled.disconnect(receiver)
    assert batches == [[ids[0], ids[2]]]
    assert [kw["job_id"] for kw in _only(sent, "job_scheduled")] == [ids[1], ids[3]]
    rows = {row.pk: (row.args, row.queue, row.max_attempts) for row in Job.objects.all()}
    assert [rows[i] for i in ids] == [([1, 2], "default", 3), ([3, 4], "emails", 3),
                                      ([5, 6], "default", 3), ([7, 8], "default", 2)]


def test_an_async_receiver_that_exits_stops_no_other_receiver(caplog) -> None:  # type: ignore[no-untyped-def]
    """``sys.exit()`` in one async receiver is logged, naming it; the other async
    receivers run all the same (it ended the gather: the next one never ran)."""
    ran: list[str] = []

    async def exits(**kwargs: Any) -> None:
        raise SystemExit(3)

    async def slower(**kwargs: Any) -> None:
        await asyncio.sleep(0.05)
        ran.append("slower")

    for fn in (exits, slower):
        signals.job_expired.connect(fn, weak=False)
    try:
        signals.send(signals.job_expired, job_id="j", queue="default", callable_path="x",
                     attempts=0, worker_id="w", due_at=timezone.now(),
                     expires_at=timezone.now())
    finally:
        for fn in (exits, slower):
            signals.job_expired.disconnect(fn)
    assert ran == ["slower"]
    failed = [r.getMessage() for r in caplog.records if r.name == "django_delayq.signals"]
    assert len(failed) == 1 and "exits" in failed[0], failed


def test_a_receiver_is_not_handed_other_base_exceptions() -> None:
    """Only an exception or ``SystemExit`` is a receiver's failure: a green thread's kill
    or a test runner's outcome (``BaseException``s) goes on to the caller."""
    class Killed(BaseException):
        pass

    def killed(**kwargs: Any) -> None:
        raise Killed

    signals.job_expired.connect(killed, weak=False)
    try:
        with pytest.raises(Killed):
            signals.send(signals.job_expired, job_id="j", queue="default", callable_path="x",
                         attempts=0, worker_id="w", due_at=timezone.now(),
                         expires_at=timezone.now())
    finally:
        signals.job_expired.disconnect(killed)
