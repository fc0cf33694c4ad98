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

# The public names by the module they come from (under django_delayq.); each is imported
# from there the first time it is used.
_MODULES = {
    # scheduling and managing jobs
    "core.api": ("schedule", "schedule_many", "schedule_spec", "JobSpec", "job", "JobCall",
                 "cancel", "run_now", "reschedule", "requeue", "get_job", "JobHandle"),
    # the same for async code (ASGI views): awaitable, never blocking the event loop
    "core.aio": ("aschedule", "aschedule_spec", "acancel", "areschedule", "arun_now",
                 "arequeue", "aget_job", "await_result", "AsyncJobHandle"),
    "core.options": ("atomic_job",),  # a function whose jobs are atomic
    # workflows: jobs that wait for other jobs (docs/workflows.md)
    "core.canvas": ("chain", "group", "GroupResult"),
    "core.workflows": ("Signature",),
    # whole queues
    "core.queues": ("pause_queue", "resume_queue", "paused_queues", "purge_queue",
                    "pause_group", "resume_group", "paused_groups", "purge_group"),
    "core.group_limits": ("set_group_limit", "clear_group_limit", "group_limits",
                          "GroupOverride"),
    # what cancel() and reschedule()/run_now() return
    "engine.outcomes": ("CancelOutcome", "MoveOutcome"),
    # inside a running job
    "core.context": ("current_job",),
    "core.progress": ("report_progress",),
    # Retry (raised inside a running job), then the errors
    "exceptions": ("Retry", "InvalidJob", "DelayQError", "JobNotFound", "JobFailed",
                   "JobNotFinished", "NotInJob", "WaitTimeout"),
}
_LAZY = {name: "django_delayq." + module for module, names in _MODULES.items() for name in names}

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
