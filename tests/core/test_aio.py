"""The async API in ASGI views, driven by Django's AsyncClient on a real Redis and
database: aschedule, acancel and the awaitable wait, which never blocks the event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import SynchronousOnlyOperation
from django.db import transaction
from django.db.transaction import TransactionManagementError
from django.test import AsyncClient

from django_delayq import (
    AsyncJobHandle,
    CancelOutcome,
    MoveOutcome,
    aschedule,
    await_result,
    schedule,
)
from django_delayq.core import aio
from django_delayq.core.connection import get_engine
from django_delayq.exceptions import InvalidJob, JobFailed, JobNotFound, WaitTimeout
from django_delayq.models import Job, JobStatus
from tests.helpers import burst

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.aio_urls")]


def test_an_async_view_schedules_and_cancels(delayq_engine):
    async def scenario() -> tuple[dict, dict, int]:  # type: ignore[type-arg]
        client = AsyncClient()
        placed = (await client.get("/place/", {"a": "40", "delay": "3600"})).json()
        cancelled = (await client.get("/cancel/%s/" % placed["id"])).json()
        refused = await client.get("/place/", {"a": "1", "delay": "-1"})
        return placed, cancelled, refused.status_code

    placed, cancelled, refused = async_to_sync(scenario)()
    assert placed["queue"] == "default" and cancelled == {"outcome": "CANCELLED"}
    assert Job.objects.get(pk=placed["id"]).status == JobStatus.CANCELLED
    assert refused == 400  # the same checks as schedule(), the same InvalidJob


def test_an_async_view_awaits_a_result_a_worker_produces(delayq_settings):
    job_id = schedule("tests.jobs.add", 40, 2).id
    worker = threading.Thread(target=burst)

    async def scenario() -> dict:  # type: ignore[type-arg]
        worker.start()
        return (await AsyncClient().get("/result/%s/" % job_id, {"timeout": "60"})).json()

    try:
        assert async_to_sync(scenario)() == {"result": 42}
    finally:
        worker.join(60)


def test_waiting_leaves_the_event_loop_free(delayq_settings):
    async def scenario() -> tuple[int, str]:
        handle = await aschedule("tests.jobs.add", 1, 2, delay=3600)
        assert isinstance(handle, AsyncJobHandle)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        running = asyncio.ensure_future(ticker())
        try:
            await handle.await_result(timeout=0.3)
        except WaitTimeout as exc:
            outcome = str(exc)
        finally:
            running.cancel()
        return ticks, outcome

    ticks, outcome = async_to_sync(scenario)()
    assert ticks >= 10, ticks  # the loop ran other work while the wait went on
    assert "scheduled" in outcome


def test_handle_members_and_a_failed_job(delayq_settings):
    dead = schedule("tests.jobs.boom", "no", max_attempts=1).id
    burst()

    async def scenario() -> tuple[str, CancelOutcome, str]:
        handle = await aschedule("tests.jobs.noop", delay=3600)
        row = await handle.arefresh()
        outcome = await handle.acancel()
        try:
            await await_result(dead, timeout=5)
        except JobFailed as exc:
            failed = str(exc)
        return row.status, outcome, failed

    status, outcome, failed = async_to_sync(scenario)()
    assert (status, outcome) == (JobStatus.SCHEDULED, CancelOutcome.CANCELLED)
    assert "dead" in failed


def test_bad_input_is_refused_as_by_the_sync_api(delayq_settings):
    async def scenario() -> list[str]:
        errors = []
        for call in (aschedule("tests.jobs.add", 1, 2, delay=-1),
                     await_result("01" + "x" * 24, timeout=-1),
                     aio.areschedule("not an id", delay=5)):
            try:
                await call
            except (InvalidJob, JobNotFound) as exc:
                errors.append(type(exc).__name__)
                if "timeout" in str(exc):  # the call the caller made, named
                    assert str(exc).startswith("await_result(timeout=-1)"), exc
        return errors

    assert async_to_sync(scenario)() == ["InvalidJob", "InvalidJob", "JobNotFound"]


def test_the_sync_api_in_async_code_is_refused_by_django(delayq_settings):
    async def scenario() -> None:
        schedule("tests.jobs.noop")  # what the async API is for

    with pytest.raises(SynchronousOnlyOperation):
        async_to_sync(scenario)()


def test_await_result_inside_an_atomic_block_is_refused_at_once_as_wait_is(delayq_settings):
    """Driven from synchronous code (``async_to_sync``), its reads run on the caller's
    thread, inside its atomic block: the row cannot change there, so the wait would only
    time out (or, without a timeout, never end)."""
    with transaction.atomic():
        job_id = schedule("tests.jobs.noop", 1).id
        with pytest.raises(TransactionManagementError, match="await_result"):
            async_to_sync(await_result)(job_id, 5)
        with pytest.raises(TransactionManagementError, match="wait"):
            schedule("tests.jobs.noop", 2).wait()


def test_areschedule_and_arun_now_in_the_scheduling_transaction_move_its_send(
        delayq_settings):
    """Driven from synchronous code inside its atomic block (``async_to_sync``): they run
    on the caller's thread, in its transaction, as ``reschedule`` and ``run_now`` do."""
    with transaction.atomic():
        later, now = (schedule("tests.jobs.noop", i, delay=3600) for i in range(2))
        assert async_to_sync(aio.areschedule)(later.id, delay=120) is MoveOutcome.MOVED
        assert async_to_sync(aio.arun_now)(now.id) is MoveOutcome.MOVED
    engine = get_engine()
    # <=: read within the millisecond of the send, the clock gives the due time - 120 s
    assert engine.time_ms() + 60_000 < engine.inspect("default", later.id).score_ms <= \
        engine.time_ms() + 120_000
    assert [j.id for j in engine.claim("default", 10, 30_000).jobs] == [now.id]
