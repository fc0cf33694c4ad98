"""django-delayq: run functions later, reliably, on Redis.

The public API is loaded lazily (PEP 562): ``import django_delayq`` imports nothing
else, so it works before Django's settings are configured and importing
``django_delayq.engine`` never imports Django. A name is imported from its module
the first time it is used (``django_delayq.schedule``, ``from django_delayq import job``)
and kept in this module from then on.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    # scheduling and managing jobs
    "schedule": "django_delayq.core.api",
    "schedule_many": "django_delayq.core.api",
    "schedule_spec": "django_delayq.core.api",
    "JobSpec": "django_delayq.core.api",
    "job": "django_delayq.core.api",
    "JobCall": "django_delayq.core.api",
    "cancel": "django_delayq.core.api",
    "run_now": "django_delayq.core.api",
    "reschedule": "django_delayq.core.api",
    "requeue": "django_delayq.core.api",
    "get_job": "django_delayq.core.api",
    "JobHandle": "django_delayq.core.api",
    # the same for async code (ASGI views): awaitable, never blocking the event loop
    "aschedule": "django_delayq.core.aio",
    "aschedule_spec": "django_delayq.core.aio",
    "acancel": "django_delayq.core.aio",
    "areschedule": "django_delayq.core.aio",
    "arun_now": "django_delayq.core.aio",
    "arequeue": "django_delayq.core.aio",
    "aget_job": "django_delayq.core.aio",
    "await_result": "django_delayq.core.aio",
    "AsyncJobHandle": "django_delayq.core.aio",
    "atomic_job": "django_delayq.core.options",  # a function whose jobs are atomic
    # workflows: jobs that wait for other jobs (docs/workflows.md)
    "chain": "django_delayq.core.canvas",
    "group": "django_delayq.core.canvas",
    "GroupResult": "django_delayq.core.canvas",
    "Signature": "django_delayq.core.workflows",
    # whole queues
    "pause_queue": "django_delayq.core.queues",
    "resume_queue": "django_delayq.core.queues",
    "paused_queues": "django_delayq.core.queues",
    "pause_group": "django_delayq.core.queues",
    "resume_group": "django_delayq.core.queues",
    "paused_groups": "django_delayq.core.queues",
    "purge_group": "django_delayq.core.queues",
    "set_group_limit": "django_delayq.core.group_limits",
    "clear_group_limit": "django_delayq.core.group_limits",
    "group_limits": "django_delayq.core.group_limits",
    "GroupOverride": "django_delayq.core.group_limits",
    "purge_queue": "django_delayq.core.queues",
    # what cancel() and reschedule()/run_now() return
    "CancelOutcome": "django_delayq.engine.outcomes",
    "MoveOutcome": "django_delayq.engine.outcomes",
    # inside a running job
    "current_job": "django_delayq.core.context",
    "report_progress": "django_delayq.core.progress",
    "Retry": "django_delayq.exceptions",
    # errors
    "InvalidJob": "django_delayq.exceptions",
    "DelayQError": "django_delayq.exceptions",
    "JobNotFound": "django_delayq.exceptions",
    "JobFailed": "django_delayq.exceptions",
    "JobNotFinished": "django_delayq.exceptions",
    "NotInJob": "django_delayq.exceptions",
    "WaitTimeout": "django_delayq.exceptions",
}

__all__ = list(_LAZY)

if TYPE_CHECKING:  # pragma: no cover
    from django_delayq.core.aio import (  # noqa: F401
        AsyncJobHandle,
        acancel,
        aget_job,
        arequeue,
        areschedule,
        arun_now,
        aschedule,
        aschedule_spec,
        await_result,
    )
    from django_delayq.core.api import (  # noqa: F401
        JobCall,
        JobHandle,
        JobSpec,
        cancel,
        get_job,
        job,
        requeue,
        reschedule,
        run_now,
        schedule,
        schedule_many,
        schedule_spec,
    )
    from django_delayq.core.canvas import GroupResult, chain, group  # noqa: F401
    from django_delayq.core.context import current_job  # noqa: F401
    from django_delayq.core.group_limits import (  # noqa: F401
        GroupOverride,
        clear_group_limit,
        group_limits,
        set_group_limit,
    )
    from django_delayq.core.options import atomic_job  # noqa: F401
    from django_delayq.core.progress import report_progress  # noqa: F401
    from django_delayq.core.queues import (  # noqa: F401
        pause_group,
        pause_queue,
        paused_groups,
        paused_queues,
        purge_group,
        purge_queue,
        resume_group,
        resume_queue,
    )
    from django_delayq.core.workflows import Signature  # noqa: F401
    from django_delayq.engine.outcomes import CancelOutcome, MoveOutcome  # noqa: F401
    from django_delayq.exceptions import (  # noqa: F401
        DelayQError,
        InvalidJob,
        JobFailed,
        JobNotFinished,
        JobNotFound,
        NotInJob,
        Retry,
        WaitTimeout,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError("module 'django_delayq' has no attribute %r" % name)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, "__version__"})
