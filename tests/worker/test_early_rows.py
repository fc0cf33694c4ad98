"""Final rows written while Redis cannot be reached (``worker/early_rows.py``), in process:
only while the lease is the worker's, once per outcome, never while Redis answers; the
usual record follows once Redis settles, its signal sent once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from django_delayq import schedule, signals
from django_delayq.core import payloads
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.loop import Worker, WorkerOptions
from tests.worker.conftest import run_claimed

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def succeeded() -> Any:
    seen: list[str] = []

    def got(*, job_id: str, **kwargs: Any) -> None:
        seen.append(job_id)

    signals.job_succeeded.connect(got, weak=False)
    yield seen
    signals.job_succeeded.disconnect(got)


def _worker(monkeypatch: Any) -> tuple[Worker, list[int]]:
    """A worker settling with calls (no ack stream), its early writes counted."""
    worker = Worker(get_engine(), get_settings(), WorkerOptions(queues=("default",)))
    s = worker.settlement
    s.stream = s.settler.stream = None
    writes: list[int] = []
    write_now = worker.audit.write_now
    monkeypatch.setattr(worker.audit, "write_now", lambda changes, attempts, fence: (
        writes.append(len(changes)), write_now(changes, attempts, fence)))
    return worker, writes


def test_rows_written_early_only_within_the_lease_and_once(delayq_settings, monkeypatch,  # type: ignore[no-untyped-def]
                                                          succeeded) -> None:
    kept, lapsed = schedule("tests.jobs.add", 1, 1), schedule("tests.jobs.add", 2, 2)
    engine = get_engine()
    worker, writes = _worker(monkeypatch)
    run_claimed(worker, payloads.load(engine.claim("default", 10, 60_000).jobs))
    left = {kept.id: 30.0, lapsed.id: 0.1}  # seconds of lease left, as the ledger counts
    monkeypatch.setattr(worker.settlement.early, "lease_left", lambda job: left[job.id])
    ack = engine.ack

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("Connection refused")

    monkeypatch.setattr(engine, "ack", unreachable)
    s = worker.settlement
    for _ in range(3):  # three rounds of the outage: one write (on the writer's thread)
        with pytest.raises(RedisConnectionError):
            s.settle_once()
        s.early.write_pending()
    assert writes == [1]
    assert kept.status == JobStatus.SUCCEEDED and kept.job.result == 2
    assert Job.objects.get(pk=lapsed.id).status != JobStatus.SUCCEEDED  # lease may be gone
    assert not succeeded  # signals wait for Redis
    early = Job.objects.get(pk=kept.id)
    monkeypatch.setattr(engine, "ack", ack)  # Redis answers again
    s.settle_once()
    s.early.write_pending()
    worker.audit.flush()
    assert writes == [1]
    assert sorted(succeeded) == sorted([kept.id, lapsed.id])
    assert lapsed.status == JobStatus.SUCCEEDED and lapsed.job.result == 4
    assert Job.objects.get(pk=kept.id).updated_at == early.updated_at  # unchanged
    assert worker.ledger.idle()


def test_nothing_is_written_early_while_redis_answers(delayq_settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    handles = [schedule("tests.jobs.add", i, 1) for i in range(3)]
    worker, writes = _worker(monkeypatch)
    run_claimed(worker, payloads.load(get_engine().claim("default", 10, 60_000).jobs))
    worker.settlement.settle_once()
    worker.settlement.early.write_pending()
    worker.audit.flush()
    assert {h.status for h in handles} == {JobStatus.SUCCEEDED}
    assert writes == []


def test_an_attempt_written_early_hides_no_later_run_of_the_same_number(  # type: ignore[no-untyped-def]
        delayq_settings) -> None:
    """A dead job requeued (its attempts start again at 1) and dead again on the same
    worker: its second attempt 1 is written, though the first was written early and the
    settler never recorded it a second time (Redis settled it after the early write)."""
    h = schedule("tests.jobs.add", 1, 1)
    audit = AuditWriter()
    first = timezone.now()
    audit.write_now({}, [JobAttempt(job_id=h.id, number=1, outcome=JobStatus.DEAD,
                                    started_at=first, finished_at=first, error="boom 1")])
    again = first + timedelta(seconds=5)
    audit.attempt(job_id=h.id, number=1, outcome=JobStatus.DEAD, started_at=again,
                  finished_at=again, error="boom 2")
    audit.flush()
    assert sorted(JobAttempt.objects.filter(job_id=h.id).values_list("error", flat=True)) == [
        "boom 1", "boom 2"]


def test_an_outcome_handed_over_during_a_write_is_written_next(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch) -> None:
    """The settling thread hands the writer an outcome while it writes others: kept for
    its next round, not dropped with what that write took."""
    first, second = schedule("tests.jobs.add", 1, 1), schedule("tests.jobs.add", 2, 2)
    engine = get_engine()
    worker, writes = _worker(monkeypatch)
    run_claimed(worker, payloads.load(engine.claim("default", 10, 60_000).jobs))

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("Connection refused")

    monkeypatch.setattr(engine, "ack", unreachable)
    early = worker.settlement.early
    monkeypatch.setattr(early, "lease_left", lambda job: 30.0)
    with pytest.raises(RedisConnectionError):
        worker.settlement.settle_once()
    late = next(o for o in early._pending.values() if o.job.id == second.id)
    del early._pending[id(late)]
    write_now = worker.audit.write_now

    def handed_over_meanwhile(changes: Any, attempts: Any, fence: Any) -> None:
        early.submit([late])  # as the settling thread would, during this write
        write_now(changes, attempts, fence)

    monkeypatch.setattr(worker.audit, "write_now", handed_over_meanwhile)
    early.write_pending()
    assert Job.objects.get(pk=first.id).status == JobStatus.SUCCEEDED
    early.write_pending()
    assert Job.objects.get(pk=second.id).status == JobStatus.SUCCEEDED
