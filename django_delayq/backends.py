"""A backend for Django's Tasks framework: ``@task`` functions run on django-delayq.

::

    TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQBackend",
                         "OPTIONS": {"MAX_ATTEMPTS": 5, "BACKOFF": [15, 180, 600, 1800]}}}

A task runs once by default: Django's Tasks framework promises ``FAILED`` once the
function raised, so retries are opt-in through ``OPTIONS["MAX_ATTEMPTS"]`` (and its
``BACKOFF``), not inherited from ``DELAYQ["DEFAULT_MAX_ATTEMPTS"]``. Bad options are an
``ImproperlyConfigured`` naming the alias, the key and the value when the backend is built.

``task.enqueue()`` is ``django_delayq.schedule()`` with the task's function path;
``run_after`` may be an aware datetime or a ``timedelta`` (from enqueue time). Results
are read from the audit rows: ``Job`` (status, times, return value, worker) and
``JobAttempt`` (one row per failed attempt: worker ids, and errors, whose
``exception_class_path`` is the attempt's recorded ``error_type``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import import_string

from django_delayq import compat
from django_delayq.core import registry
from django_delayq.core.context import JobContext, current_job
from django_delayq.engine import backoff as backoff_mod
from django_delayq.exceptions import InvalidJob
from django_delayq.models import Job, JobAttempt, JobStatus

compat.require_tasks()
assert compat.tasks_base is not None and compat.task_signals is not None

logger = logging.getLogger(__name__)

base = compat.tasks_base
task_signals = compat.task_signals
Task = base.Task
TaskContext = base.TaskContext
TaskError = base.TaskError
TaskResult = base.TaskResult
TaskResultStatus = base.TaskResultStatus

STATUS = {
    JobStatus.SCHEDULED: TaskResultStatus.READY,
    JobStatus.RETRYING: TaskResultStatus.READY,  # "ready to be executed again"
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,  # "unable to start" (or not retried)
}
# schedule()'s own keywords: a task kwarg with one of these names cannot be passed through.
RESERVED_KWARGS = frozenset({"fn", "delay", "at", "queue", "max_attempts", "backoff", "key"})
OPTIONS = frozenset({"MAX_ATTEMPTS", "BACKOFF"})
DEFAULT_MAX_ATTEMPTS = 1  # a raising task is FAILED at once, as Django's docs describe


class DelayQBackend(compat.BaseTaskBackend):  # type: ignore[misc, name-defined]
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False  # the engine orders jobs by due time only

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Without QUEUES, the queues of DELAYQ["QUEUES"] are valid (checked per task).
        self.own_queues = "QUEUES" in params
        if not self.own_queues:
            self.queues: set[str] = set()
        self.max_attempts, self.backoff = retry_options(alias, self.options)

    # -- validation ---------------------------------------------------------------

    def validate_task(self, task: Any) -> None:
        if isinstance(task.run_after, timedelta):
            if task.run_after < timedelta(0):
                raise compat.InvalidTask("run_after must not be a negative timedelta, not %r"
                                         % (task.run_after,))
            task = dataclasses.replace(task, run_after=None)
        super().validate_task(task)
        if not self.own_queues:
            from django_delayq.core.conf import get_settings

            queues = get_settings().queues
            if task.queue_name not in queues:
                raise compat.InvalidTask("Queue %r is not in DELAYQ['QUEUES'] %r"
                                         % (task.queue_name, list(queues)))

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        unknown = sorted(set(self.options) - OPTIONS)
        if unknown:
            yield checks.Error("TASKS[%r]['OPTIONS'] has unknown key(s) %s" % (self.alias, unknown),
                               hint="Known: %s" % ", ".join(sorted(OPTIONS)), id="delayq.E101")

    # -- enqueue ------------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        from django_delayq.core import api

        self.validate_task(task)
        clash = sorted(RESERVED_KWARGS & set(kwargs))
        if clash:
            raise compat.InvalidTask("keyword argument(s) %s clash with schedule()'s own "
                                     "parameters; rename them" % clash)
        delay, at = _when(task.run_after)
        try:
            handle = api.schedule(task.module_path, *args, delay=delay, at=at,
                                  queue=task.queue_name, max_attempts=self.max_attempts,
                                  backoff=self.backoff, **kwargs)
        except InvalidJob as exc:
            raise compat.InvalidTask(str(exc)) from exc
        result = self._new_result(task, handle.id, list(args), dict(kwargs))
        task_signals.task_enqueued.send(sender=type(self), task_result=result)
        return result

    def _new_result(self, task: Any, job_id: str, args: list[Any],
                    kwargs: dict[str, Any]) -> Any:
        return TaskResult(task=task, id=job_id, status=TaskResultStatus.READY,
                          enqueued_at=timezone.now(), started_at=None, finished_at=None,
                          last_attempted_at=None, args=args, kwargs=kwargs, backend=self.alias,
                          errors=[], worker_ids=[])

    # -- results ------------------------------------------------------------------

    def get_result(self, result_id: str) -> Any:
        row = Job.objects.filter(pk=result_id).first()
        if row is None:
            raise compat.TaskResultDoesNotExist(result_id)
        attempts = list(JobAttempt.objects.filter(job_id=row.pk).order_by("number", "pk"))
        return self._result(row, attempts)

    def _result(self, row: Job, attempts: list[JobAttempt]) -> Any:
        final = row.status in (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)
        first_start = next((a.started_at for a in attempts if a.started_at), row.started_at)
        result = TaskResult(
            task=self._task_of(row), id=row.pk, status=STATUS[JobStatus(row.status)],
            enqueued_at=row.created_at, started_at=first_start,
            last_attempted_at=row.started_at, finished_at=row.finished_at if final else None,
            args=row.args, kwargs=row.kwargs, backend=self.alias,
            errors=errors_of(row, attempts), worker_ids=worker_ids_of(row, attempts))
        if row.status == JobStatus.SUCCEEDED:
            object.__setattr__(result, "_return_value", row.result)
        return result

    def _task_of(self, row: Job) -> Any:
        """The ``Task`` a row runs: the module's ``@task`` object, or a plain job wrapped."""
        if not registry.is_allowed(row.callable_path):
            raise compat.TaskResultDoesNotExist("%s runs %r, outside ALLOWED_CALLABLES"
                                                % (row.pk, row.callable_path))
        try:
            obj = import_string(row.callable_path)
        except ImportError as exc:
            raise compat.TaskResultDoesNotExist("%s: cannot import %r"
                                                % (row.pk, row.callable_path)) from exc
        if isinstance(obj, Task):
            return obj if obj.queue_name == row.queue else obj.using(queue_name=row.queue)
        return self.task_class(func=obj, backend=self.alias, queue_name=row.queue)


def retry_options(alias: str, options: dict[str, Any]) -> tuple[int, Any]:
    """``(max_attempts, backoff)`` from a backend's OPTIONS: one attempt unless
    ``MAX_ATTEMPTS`` asks for more; ``BACKOFF`` (any DELAYQ backoff policy) only with it."""
    where = "TASKS[%r]['OPTIONS']" % alias
    max_attempts = options.get("MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ImproperlyConfigured("%s['MAX_ATTEMPTS'] must be an integer >= 1, not %r"
                                   % (where, max_attempts))
    backoff = options.get("BACKOFF")
    if why := backoff_mod.validate(backoff):
        raise ImproperlyConfigured("%s['BACKOFF'] %r: %s" % (where, backoff, why))
    if backoff is not None and max_attempts == 1:
        raise ImproperlyConfigured("%s['BACKOFF'] %r has no effect with one attempt: set "
                                   "MAX_ATTEMPTS > 1 to retry" % (where, backoff))
    return max_attempts, backoff


def _when(run_after: Any) -> tuple[timedelta | None, datetime | None]:
    if run_after is None:
        return None, None
    if isinstance(run_after, timedelta):
        return run_after, None
    return None, run_after


# -- audit rows -> Django's result fields ------------------------------------------

def _error(error_type: str, error: str, traceback: str) -> Any:
    """A ``TaskError`` from an attempt's recorded failure: its exception class path as
    recorded, and its traceback (``"Type: message"`` when it has none, as a lost lease)."""
    path = error_type or "builtins.Exception"  # rows written before error_type existed
    return TaskError(exception_class_path=path,
                     traceback=traceback or "%s: %s" % (path, error))


def errors_of(row: Job, attempts: list[JobAttempt]) -> list[Any]:
    found = [_error(a.error_type, a.error, a.traceback) for a in attempts
             if a.error_type or a.error]
    if not found and row.status == JobStatus.DEAD and (row.error_type or row.last_error):
        # e.g. DELAYQ["EAGER"] runs, which record no JobAttempt
        found.append(_error(row.error_type, row.last_error, row.traceback))
    return found


def worker_ids_of(row: Job, attempts: list[JobAttempt]) -> list[str]:
    """One worker id per attempt made so far (``len() == attempts``, as Django expects)."""
    by_number = {a.number: a.worker_id for a in attempts if a.worker_id}
    return [by_number.get(n, row.worker_id) for n in range(1, row.attempts + 1)]


# -- running ``takes_context`` tasks ----------------------------------------------------

def task_callable(task: Any) -> Callable[..., Any]:
    """What the worker calls for a ``Task`` object: its function, given a
    ``TaskContext`` first when the task ``takes_context``."""
    if not getattr(task, "takes_context", False):
        return task.func  # type: ignore[no-any-return]

    def call_with_context(*args: Any, **kwargs: Any) -> Any:
        ctx = current_job()
        if ctx is None:
            raise RuntimeError("%s takes a context: it runs only as a job" % task.module_path)
        return task.func(TaskContext(task_result=running_result(task, ctx)), *args, **kwargs)

    return call_with_context


def running_result(task: Any, ctx: JobContext) -> Any:
    """The ``TaskResult`` of the attempt running now (``context.attempt == ctx.attempt``)."""
    row = Job.objects.filter(pk=ctx.id).first()
    attempts = list(JobAttempt.objects.filter(job_id=ctx.id, number__lt=ctx.attempt)
                    .order_by("number", "pk")) if row is not None else []
    by_number = {a.number: a.worker_id for a in attempts}
    workers = [by_number.get(n, "") for n in range(1, ctx.attempt)] + [ctx.worker_id]
    now = timezone.now()
    alias = task.backend
    return TaskResult(
        task=task, id=ctx.id, status=TaskResultStatus.RUNNING,
        enqueued_at=row.created_at if row else None,
        started_at=next((a.started_at for a in attempts if a.started_at), now),
        last_attempted_at=now, finished_at=None,
        args=row.args if row else [], kwargs=row.kwargs if row else {}, backend=alias,
        errors=[_error(a.error_type, a.error, a.traceback) for a in attempts
                if a.error_type or a.error], worker_ids=workers)


registry.set_task_caller(task_callable)
