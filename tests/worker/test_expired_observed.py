"""A job that ends ``expired`` is observed like any other end, whichever component
expires it (a real worker at claim, the reconciler from a worker's settled record, the
testing helpers): one ``job_expired`` signal with its documented arguments, the
``expired`` status of ``delayq_jobs_finished_total`` and an ``expired`` event in the
stream (docs/signals.md, docs/observability.md, docs/status.md)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.dispatch import Signal
from django.utils import timezone

from django_delayq import compat, schedule, signals
from django_delayq.core import events
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job, JobStatus
from django_delayq.testing import run_due_jobs
from django_delayq.worker.tracking import EXIT_OK
from tests.helpers import burst, connected, wait_until
from tests.worker.test_expiry_retry_on import claim_its_retry_expired

pytestmark = pytest.mark.django_db(transaction=True)

EXPIRED_ARGS = {"job_id", "queue", "callable_path", "attempts", "worker_id", "due_at",
                "expires_at"}
WATCHED = ("job_started", "job_retrying", "job_dead", "job_succeeded", "job_cancelled",
           "job_expired")


@pytest.fixture
def sent(delayq_settings) -> Iterator[list[tuple[str, dict[str, Any]]]]:  # type: ignore[no-untyped-def]
    """The job signals sent, by name, each with its arguments (``sender`` and ``signal``
    left out; ``sender`` checked)."""
    got: list[tuple[str, dict[str, Any]]] = []

    def receiver(sender: object, signal: Signal, **kwargs: Any) -> None:
        assert sender is Job
        got.append(({getattr(signals, n): n for n in WATCHED}[signal], kwargs))

    with connected({getattr(signals, name): receiver for name in WATCHED}):
        yield got


def _finished_expired(queue: str) -> float:
    if compat.prometheus_client is None:
        return 0.0
    return compat.prometheus_client.REGISTRY.get_sample_value(
        "delayq_jobs_finished_total", {"queue": queue, "status": "expired"}) or 0.0


def _events_of(job_id: str) -> list[dict[str, str]]:
    events.flush()
    engine = get_engine()
    raw = engine.client.xrange(events.stream_key(engine.prefix))
    found = [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in raw]
    return [e for e in found if e["job"] == job_id]


def _past(expires_at: datetime | None) -> None:
    assert expires_at is not None
    wait_until(lambda: datetime.now(UTC) > expires_at + timedelta(milliseconds=50), timeout=5)


def _check_expired(kw: dict[str, Any], row: Job, attempts: int) -> None:
    assert set(kw) == EXPIRED_ARGS, sorted(kw)
    assert (kw["job_id"], kw["queue"], kw["callable_path"], kw["attempts"]) == (
        row.pk, row.queue, row.callable_path, attempts)
    assert timezone.is_aware(kw["due_at"]) and timezone.is_aware(kw["expires_at"])
    assert row.expires_at is not None  # a worker read it to the millisecond
    assert abs(kw["expires_at"] - row.expires_at) < timedelta(milliseconds=1)


def test_a_job_a_worker_expires_at_claim_is_signalled_counted_and_streamed(sent) -> None:  # type: ignore[no-untyped-def]
    before = _finished_expired("default")
    gone = schedule("tests.jobs.add", 1, 2, expires=0.2)
    _past(gone.job.expires_at)
    assert burst() == EXIT_OK
    row = gone.job
    assert row.status == JobStatus.EXPIRED
    assert [name for name, _ in sent] == ["job_expired"]  # it never started
    [(_, kw)] = sent
    _check_expired(kw, row, 0)
    assert kw["worker_id"] == row.worker_id != ""
    if compat.prometheus_client is not None:
        assert _finished_expired("default") == before + 1
    [ev] = [e for e in _events_of(gone.id) if e["event"] != "scheduled"]
    assert (ev["event"], ev["queue"], ev["callable"], ev["attempts"], ev["worker"]) == (
        "expired", "default", "tests.jobs.add", "0", row.worker_id)
    assert ev["expires_at"] == kw["expires_at"].isoformat() and ev["due_at"]
    out = StringIO()  # what --follow shows of it
    call_command("delayq_status", "--follow", "--last", "1", "--count", "1", stdout=out)
    [line] = out.getvalue().splitlines()
    assert line.split()[1:3] == ["expired", "default"] and gone.id in line
    assert "attempts=0" in line and "expires_at=%s" % ev["expires_at"] in line


def test_a_retry_a_worker_expires_at_claim_sends_job_expired_after_job_retrying(sent) -> None:  # type: ignore[no-untyped-def]
    handle = schedule("tests.jobs.boom", "kaput", max_attempts=3, backoff=[3600],
                      expires=timedelta(hours=2))
    assert burst() == EXIT_OK
    claim_its_retry_expired(handle)
    row = handle.job
    assert (row.status, row.attempts) == (JobStatus.EXPIRED, 1)
    assert [name for name, _ in sent] == ["job_started", "job_retrying", "job_expired"]
    _check_expired(sent[-1][1], row, 1)
    assert [e["event"] for e in _events_of(handle.id) if e["event"] != "started"] == [
        "scheduled", "retrying", "expired"]


def test_run_due_jobs_sends_job_expired_as_a_worker(sent, delayq_settings) -> None:  # type: ignore[no-untyped-def]
    before = _finished_expired("slow")
    gone = schedule("tests.jobs.add", 1, 2, queue="slow", expires=0.2)
    _past(gone.job.expires_at)
    assert run_due_jobs(["slow"]) == 1
    assert gone.job.status == JobStatus.EXPIRED
    [(name, kw)] = sent
    assert (name, kw["worker_id"]) == ("job_expired", "testing")
    _check_expired(kw, gone.job, 0)
    if compat.prometheus_client is not None:
        assert _finished_expired("slow") == before + 1


def test_the_reconciler_settling_an_expiry_from_a_workers_record_sends_job_expired(sent) -> None:  # type: ignore[no-untyped-def]
    """The worker acked the job as expired (Redis's settled record) and died before its
    row was written: the reconciler ends the row ``expired`` and sends the signal."""
    engine = get_engine()
    before = _finished_expired("default")
    h = schedule("tests.jobs.noop", expires=timedelta(hours=1))
    [job] = engine.claim("default", 1, 60_000).jobs
    assert engine.ack("default", [(job.id, job.token)], holder="gone:1", codes=["x"]) == [True]
    engine.client.zadd("{%s}:workers" % get_settings().prefix,
                       {"gone:1": engine.time_ms() - 3 * get_settings().lease_ms})
    r = Reconciler(engine, get_settings(), ("default",))
    r.check_epochs()
    r.run_all(grace_seconds=0)
    row = h.job
    assert (row.status, row.attempts, row.worker_id) == (JobStatus.EXPIRED, 0, "gone:1")
    [(name, kw)] = sent
    assert (name, kw["worker_id"]) == ("job_expired", "gone:1")
    _check_expired(kw, row, 0)
    assert kw["due_at"] == row.run_at
    if compat.prometheus_client is not None:
        assert _finished_expired("default") == before + 1
    [ev] = [e for e in _events_of(h.id) if e["event"] != "scheduled"]
    assert (ev["event"], ev["worker"]) == ("expired", "gone:1")
