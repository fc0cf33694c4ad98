"""django-delayq: run functions later, reliably, on Redis.

The public API is loaded lazily (a module-level ``__getattr__`` imports a name when it
is first asked for): ``import django_delayq`` imports nothing else, so it works before
Django's settings are configured and importing ``django_delayq.engine`` never imports
Django. A name is imported from its module the first time it is used
(``django_delayq.schedule``, ``from django_delayq import job``) and kept in this module
from then on.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"


def _public_names() -> dict[str, str]:
    """Each public name and the module it comes from (under django_delayq.), read from the
    imports under ``if TYPE_CHECKING:`` below: the type checker and the lazy loader share
    that one list (as ``lazy_loader.attach_stub`` reads a stub's imports). Each name is
    imported from its module the first time it is used (``__getattr__``)."""
    tree = ast.parse(Path(__file__).read_text("utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and ast.unparse(node.test) == "TYPE_CHECKING")
    return {alias.name: node.module for node in block.body
            if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}


_LAZY = _public_names()
__all__ = list(_LAZY)

if TYPE_CHECKING:  # pragma: no cover - the one list of the public names (_public_names)
    # async code (ASGI views): the same, awaitable, never blocking the event loop
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

    # scheduling and managing jobs; chain and group: jobs that wait for other jobs
    # (docs/workflows.md)
    from django_delayq.core.api import (  # noqa: F401
        GroupResult,
        JobCall,
        JobHandle,
        JobSpec,
        cancel,
        chain,
        get_job,
        group,
        job,
        requeue,
        reschedule,
        run_now,
        schedule,
        schedule_many,
        schedule_spec,
    )

    # inside a running job
    from django_delayq.core.context import current_job  # noqa: F401

    # the limits of a queue's groups
    from django_delayq.core.group_limits import (  # noqa: F401
        GroupOverride,
        clear_group_limit,
        group_limits,
        set_group_limit,
    )

    # a function whose jobs are atomic
    from django_delayq.core.options import atomic_job  # noqa: F401
    from django_delayq.core.progress import report_progress  # noqa: F401

    # whole queues
    from django_delayq.core.queues import (  # noqa: F401
        PausedUnknown,
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

    # what cancel() and reschedule()/run_now() return
    from django_delayq.engine.outcomes import CancelOutcome, MoveOutcome  # noqa: F401

    # Retry (raised inside a running job), then the errors
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
