"""The API for async code (ASGI views, async management code): ``aschedule()``,
``acancel()``, ``areschedule()``, ``arun_now()``, ``arequeue()``, ``aget_job()`` and an
awaitable wait, ``await handle.await_result()`` (or ``await_result(job_id)``).

Each call runs its synchronous twin (``core.api``) through ``sync_to_async`` with
``thread_sensitive=True``, Django's default: the database and Redis work happens on the
one thread Django gives synchronous code, so a job is scheduled under the same rules
(its row written in the caller's transaction when there is one, its Redis send after
commit) and no connection is opened per call. Waiting never blocks the event loop: each
read of the row is one such call, and the time between reads is ``asyncio.sleep``
(starting at ``poll`` seconds, growing to at most a quarter of a second, as ``wait()``
does). Cancelling the awaiting task stops the wait and leaves the job alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from django_delayq.core import api, results
from django_delayq.models import FINAL_STATUSES, Job

if TYPE_CHECKING:
    from django_delayq.core.options import JobSpec
    from django_delayq.engine.outcomes import CancelOutcome, MoveOutcome

__all__ = ["AsyncJobHandle", "acancel", "aget_job", "arequeue", "areschedule", "arun_now",
           "aschedule", "aschedule_spec", "await_result"]


@dataclass(frozen=True, slots=True)
class AsyncJobHandle(api.JobHandle):
    """A ``JobHandle`` with awaitable counterparts of its blocking members."""

    async def arefresh(self) -> Job:
        return await aget_job(self.id)

    async def acancel(self) -> CancelOutcome:
        return await acancel(self.id)

    async def await_result(self, timeout: float | None = None, poll: float = 0.01) -> Any:
        """Wait, without blocking the event loop, until the job is final; its result (or
        ``JobFailed``), ``WaitTimeout`` after ``timeout`` seconds: ``wait()``, awaitable."""
        return await await_result(self.id, timeout, poll)


def _async(handle: api.JobHandle) -> AsyncJobHandle:
    return AsyncJobHandle(handle.id, handle.queue)


async def aschedule(fn: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> AsyncJobHandle:
    """``schedule()`` (same arguments, same checks, same errors) for async code."""
    return _async(await sync_to_async(api.schedule)(fn, *args, **kwargs))


async def aschedule_spec(fn: Callable[..., Any] | str, spec: JobSpec,
                         **options: Any) -> AsyncJobHandle:
    """``schedule_spec()`` for async code."""
    return _async(await sync_to_async(api.schedule_spec)(fn, spec, **options))


async def acancel(job_id: str) -> CancelOutcome:
    """``cancel()`` for async code."""
    return await sync_to_async(api.cancel)(job_id)


async def areschedule(job_id: str, *, delay: float | timedelta | None = None,
                      at: datetime | None = None) -> MoveOutcome:
    """``reschedule()`` for async code."""
    return await sync_to_async(api.reschedule)(job_id, delay=delay, at=at)


async def arun_now(job_id: str) -> MoveOutcome:
    """``run_now()`` for async code."""
    return await sync_to_async(api.run_now)(job_id)


async def arequeue(job_id: str, *, delay: float | timedelta = 0) -> AsyncJobHandle:
    """``requeue()`` for async code."""
    return _async(await sync_to_async(api.requeue)(job_id, delay=delay))


async def aget_job(job_id: str) -> Job:
    """``get_job()`` for async code: the job's row; ``JobNotFound`` without one."""
    return await sync_to_async(api.get_job)(job_id)


async def await_result(job_id: str, timeout: float | None = None, poll: float = 0.01) -> Any:
    """``wait()`` for async code: the job's result once it is final (``JobFailed`` when
    it ended otherwise), ``WaitTimeout`` after ``timeout`` seconds (``None``: no limit)."""
    waiting = results.Waiting(job_id, timeout, poll, "await_result")
    # on the thread of the synchronous code: inside its atomic block, refused as by wait()
    row = await sync_to_async(results.first_read)(job_id, "await_result()")
    read = sync_to_async(results.read)
    while row.status not in FINAL_STATUSES:
        await asyncio.sleep(waiting.pause(row))
        row = await read(job_id)
    return results.result_of(row)
