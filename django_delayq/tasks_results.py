"""Django ``TaskResult`` values from django-delayq's audit rows, and the Tasks signals.

The Tasks backend (``django_delayq.backends``) builds results here:

* ``stored_result(row, attempts, alias)``: what ``get_result()`` returns, from a ``Job``
  row and its ``JobAttempt`` rows. The task is the module's ``@task`` object with the
  row's queue, the enqueuing backend's alias (``enqueuing_alias``) and the row's
  ``run_after`` (its ``scheduled_for``, which a ``reschedule()`` before the first start
  moves); ``enqueued_at`` is the row's ``created_at``, so ``get_result(r.id) == r`` for a
  result just enqueued. ``TaskResult.refresh()`` reloads the task too.
* ``live_result(...)``: the result of the attempt running (or just finished) in this
  worker, for ``TaskContext.task_result`` and for ``task_started`` / ``task_finished``.

The worker writes attempt rows in batches, so a retry that starts at once may not find
its previous attempt's row yet: the errors, worker ids and starts of recent retries are
also kept in memory (``job_retrying``: a task's, and any lost lease's, whose recovery
names no callable; bounded) and merged in by number, dropped when the job ends in this
process (succeeded, dead, cancelled).

Signals: ``task_started`` when a worker starts an attempt of a task (``job_started``),
``task_finished`` when it ends for good (``job_succeeded``, ``job_dead``); a failed
attempt that will be retried sends no ``task_finished``. They are sent by observers of
the worker's lifecycle signals (which eager runs send too), only for jobs whose function
is a Django ``Task``. A FAILED ``task_finished`` is sent while handling a ``TaskFailed``
that carries the recorded failure, so the ``django.tasks`` log line shows it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from django_delayq import compat, signals
from django_delayq.core import registry
from django_delayq.core.context import current_job
from django_delayq.models import FINAL_STATUSES, Job, JobAttempt, JobStatus

if TYPE_CHECKING:  # the backport's classes; Django 6.x's django.tasks has the same ones
    from django.dispatch import Signal
    from django_tasks.base import Task as TaskT
    from django_tasks.base import TaskContext as TaskContextT
    from django_tasks.base import TaskError as TaskErrorT
    from django_tasks.base import TaskResult as TaskResultT
    from django_tasks.base import TaskResultStatus as TaskResultStatusT

    AnyTask = TaskT[..., Any]
    AnyResult = TaskResultT[Any]

compat.require_tasks()
assert compat.tasks_base is not None and compat.task_signals is not None

logger = logging.getLogger(__name__)

base = compat.tasks_base
task_signals = compat.task_signals
Task: type[AnyTask] = base.Task
TaskContext: type[TaskContextT] = base.TaskContext
TaskError: type[TaskErrorT] = base.TaskError
TaskResultStatus: type[TaskResultStatusT] = base.TaskResultStatus


if TYPE_CHECKING:
    _StoredResult = TaskResultT[Any]
else:
    _StoredResult = base.TaskResult


class TaskResult(_StoredResult):
    """Django's ``TaskResult``, whose ``refresh()`` / ``arefresh()`` also reload its
    ``task``: Django's reload only the status, times, errors and value, so a task's
    ``run_after`` would keep the due time of its enqueue after a ``reschedule()``."""

    def refresh(self) -> None:
        self._reload(self.task.get_backend().get_result(self.id))

    async def arefresh(self) -> None:
        self._reload(await self.task.get_backend().aget_result(self.id))

    def _reload(self, stored: AnyResult) -> None:
        for name in (*base.TASK_REFRESH_ATTRS, "task"):
            object.__setattr__(self, name, getattr(stored, name))

STATUS = {
    # retrying: "ready to be executed again"; waiting: for its parents (after=...)
    **dict.fromkeys((JobStatus.SCHEDULED, JobStatus.RETRYING, JobStatus.WAITING),
                    TaskResultStatus.READY),
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    # cancelled: "unable to start" (or not retried); expired: not started before its
    # expiry, never ran
    **dict.fromkeys((JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.EXPIRED),
                    TaskResultStatus.FAILED),
}
# A row's due time later than its creation by more than this was a run_after.
DUE_PRECISION = timedelta(milliseconds=1)
REMEMBERED_JOBS = 10_000


# -- the task of a row ---------------------------------------------------------------

def run_after_of(row: Job) -> datetime | None:
    """The ``run_after`` a row was enqueued with: the due time asked (``scheduled_for``,
    kept after the task started). ``schedule()`` writes a job due "now" with
    ``scheduled_for == created_at`` (one clock reading): no run_after then; any other
    value was asked, in the past too. A row without ``scheduled_for`` (written before it
    existed, or by ``schedule_dataframe``) falls back to its due time until it starts,
    when later than its creation."""
    if row.scheduled_for is not None:
        return None if row.scheduled_for == row.created_at else row.scheduled_for
    return row.run_at if row.attempts == 0 and row.run_at - row.created_at > DUE_PRECISION else None


def enqueuing_alias(obj: object, alias: str) -> str:
    """For a row without ``task_backend`` (scheduled through ``schedule()``, or before the
    column existed): the ``@task``'s own backend when that alias is a DelayQ backend too
    (the rows are shared), else ``alias``, the backend reading it. A row the Tasks backend
    enqueued carries its alias (``Job.task_backend``)."""
    declared = getattr(obj, "backend", None) if isinstance(obj, Task) else None
    if not declared or declared == alias or not _sender:
        return alias
    try:
        backend = compat.tasks.task_backends[declared]  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - an alias that is not configured (any error of it)
        return alias
    return declared if isinstance(backend, _sender[0]) else alias


def task_of(row: Job, alias: str, task_class: type[AnyTask]) -> AnyTask:
    """The ``Task`` a row runs, as seen by backend ``alias``: the module's ``@task`` object
    (or a plain job's function wrapped) with the row's queue, the enqueuing backend's
    alias and run_after."""
    try:
        obj = registry.job_object(row.callable_path)
    except (ImportError, AttributeError, PermissionError) as exc:
        raise compat.TaskResultDoesNotExist("%s runs %r: %s"
                                            % (row.pk, row.callable_path, exc)) from exc
    changes: dict[str, Any] = {
        "backend": row.task_backend or enqueuing_alias(obj, alias), "queue_name": row.queue,
        "run_after": run_after_of(row), "priority": row.priority}
    if isinstance(obj, Task):
        if all(getattr(obj, k) == v for k, v in changes.items()):
            return obj
        return dataclasses.replace(obj, **changes)
    return task_class(func=obj, **changes)


def task_at(path: str) -> AnyTask | None:
    """The ``Task`` object at ``path`` (a worker ran it, so it is allowed), else ``None``.
    The registry's own lookup: the same checks as a run, no module ``__getattr__``; a
    module whose import fails in any way (this worker's copy older or broken) gives None."""
    try:
        obj = registry.job_object(path)
    except Exception:  # noqa: BLE001 - any import failure: no Task here, the run decides
        return None
    return obj if isinstance(obj, Task) else None


# -- errors ------------------------------------------------------------------------------

def task_error(error_type: str, error: str, traceback: str) -> TaskErrorT:
    """A ``TaskError`` from an attempt's recorded failure: its exception class path as
    recorded, and its traceback (``"Type: message"`` when it has none, as a lost lease)."""
    path = error_type or "builtins.Exception"  # rows written before error_type existed
    return TaskError(exception_class_path=path, traceback=traceback or "%s: %s" % (path, error))


Remembered = tuple[str, "TaskErrorT", datetime | None]  # worker, error, start
_recent: dict[str, dict[int, Remembered]] = {}  # job id -> attempt -> what it was
_recent_lock = threading.Lock()


def previous_attempts(row: Job | None, attempts: list[JobAttempt], upto: int
                      ) -> tuple[list[TaskErrorT], list[str], datetime | None]:
    """Errors, worker ids and the first known start of attempts ``1..upto``: rows first,
    then what this process remembers of retries whose rows are not written yet."""
    with _recent_lock:
        recent = dict(_recent.get(row.pk, {})) if row is not None else {}
    by_number = {a.number: a for a in attempts if a.number <= upto}
    errors, workers, default = [], [], row.worker_id if row is not None else ""
    first: datetime | None = None
    for n in range(1, upto + 1):
        a = by_number.get(n)
        if a is not None and (a.error_type or a.error):
            errors.append(task_error(a.error_type, a.error, a.traceback))
        if a is None and n in recent:
            errors.append(recent[n][1])
        # a retry whose row is not written yet (a lost lease's names no worker: "")
        remembered = recent.get(n, (default, None, None))
        workers.append(remembered[0] or default if a is None else a.worker_id or default)
        first = first or (remembered[2] if a is None else a.started_at)
    return errors, workers, first


# -- results -----------------------------------------------------------------------------

def stored_result(row: Job, attempts: list[JobAttempt], alias: str,
                  task_class: type[AnyTask]) -> AnyResult:
    """``get_result()``: the row as it is stored."""
    errors, workers, first = previous_attempts(row, attempts, row.attempts)
    if not errors and row.status == JobStatus.DEAD and (row.error_type or row.last_error):
        # a row written without its JobAttempt (an attempt row lost with a killed worker)
        errors.append(task_error(row.error_type, row.last_error, row.traceback))
    first_start = first or next((a.started_at for a in attempts if a.started_at), row.started_at)
    task = task_of(row, alias, task_class)
    result = TaskResult(
        task=task, id=row.pk, status=STATUS[JobStatus(row.status)],
        enqueued_at=row.created_at, started_at=first_start,
        last_attempted_at=row.started_at,
        finished_at=row.finished_at if row.status in FINAL_STATUSES else None,
        args=row.args, kwargs=row.kwargs, backend=task.backend, errors=errors,
        worker_ids=workers)
    if row.status == JobStatus.SUCCEEDED:
        object.__setattr__(result, "_return_value", row.result)
    return result


def live_result(task: AnyTask, job_id: str, attempt: int, worker_id: str, started_at: datetime,
                status: TaskResultStatusT) -> AnyResult:
    """The result of attempt ``attempt`` running (or ended) in this worker: the row's
    arguments, the previous attempts' errors and workers, then this one's worker."""
    row = Job.objects.filter(pk=job_id).first()
    attempts = list(JobAttempt.objects.filter(job_id=job_id, number__lt=attempt)
                    .order_by("number", "pk")) if row is not None else []
    errors, workers, first = previous_attempts(row, attempts, attempt - 1)
    return TaskResult(
        task=task, id=job_id, status=status,
        enqueued_at=row.created_at if row else None, started_at=first or started_at,
        last_attempted_at=started_at, finished_at=None,
        args=row.args if row else [], kwargs=row.kwargs if row else {}, backend=task.backend,
        errors=errors, worker_ids=workers + [worker_id])


# -- running tasks -----------------------------------------------------------------------

def task_callable(task: AnyTask) -> Callable[..., object]:
    """What the worker calls for a ``Task`` object: its function (given a ``TaskContext``
    first when the task ``takes_context``), whose return value must be JSON: a value that
    is not raises ``TypeError``, so the task fails as Django's contract says."""
    def call(*args: object, **kwargs: object) -> object:
        if task.takes_context:
            ctx = current_job()
            if ctx is None:
                raise RuntimeError("%s takes a context: it runs only as a job" % task.module_path)
            running = live_result(task, ctx.id, ctx.attempt, ctx.worker_id,
                                  ctx.started_at or timezone.now(),  # the attempt's start
                                  TaskResultStatus.RUNNING)  # the attempt running now
            args = (TaskContext(task_result=running), *args)
        value = task.func(*args, **kwargs)
        return _awaited_json(value) if hasattr(value, "__await__") else compat.normalize_json(value)

    return call


async def _awaited_json(awaitable: Awaitable[object]) -> object:
    return compat.normalize_json(await awaitable)


# -- Django's task_started / task_finished from the worker's signals ---------------------

_sender: list[type] = []  # the backend class, given by connect()


def _send(signal: Signal, result: AnyResult) -> None:
    for receiver, outcome in signal.send_robust(sender=_sender[0], task_result=result):
        if isinstance(outcome, Exception):
            logger.error("%r receiver %r failed: %s", signal, receiver, outcome, exc_info=outcome)


def on_started(*, job_id: str, callable_path: str, attempt: int, worker_id: str,
               started_at: datetime, **kwargs: object) -> None:
    if (task := task_at(callable_path)) is not None:
        _send(task_signals.task_started, live_result(
            task, job_id, attempt, worker_id, started_at, TaskResultStatus.RUNNING))


def on_retrying(*, job_id: str, callable_path: str, attempt: int, worker_id: str,
                error: str, error_type: str, started_at: datetime | None = None,
                **kwargs: object) -> None:
    """Remember a task's failed attempt until its row is written; a lost lease's too,
    whose recovery names no callable (``callable_path=""``: any job's, then), with the
    start its row will keep (a lost one's: the start its worker wrote on the job's row)."""
    if not callable_path or task_at(callable_path) is not None:
        failed = (worker_id, task_error(error_type, error, ""), started_at)
        with _recent_lock:
            _recent.setdefault(job_id, {})[attempt] = failed
            while len(_recent) > REMEMBERED_JOBS:
                del _recent[next(iter(_recent))]


def on_finished(*, job_id: str, callable_path: str, attempt: int, worker_id: str,
                result: object = None, error: str | None = None, error_type: str = "",
                **kwargs: object) -> None:
    """``job_succeeded`` (its ``result``) and ``job_dead`` (its ``error``, ``error_type``)."""
    task = task_at(callable_path)
    if task is None:
        forget(job_id=job_id)  # any job's: a lost lease's entry names no callable
        return
    now = timezone.now()
    failure = None if error is None else task_error(error_type, error, "")
    finished = live_result(task, job_id, attempt, worker_id, now, TaskResultStatus.SUCCESSFUL
                           if failure is None else TaskResultStatus.FAILED)
    if failure is not None:
        finished.errors.append(failure)
    object.__setattr__(finished, "finished_at", now)
    object.__setattr__(finished, "_return_value", result)
    forget(job_id=job_id)
    try:  # Django's receivers log sys.exc_info() with a FAILED result
        if failure is not None:
            raise TaskFailed(failure.traceback)
        _send(task_signals.task_finished, finished)
    except TaskFailed:
        _send(task_signals.task_finished, finished)


def forget(*, job_id: str, **kwargs: object) -> None:
    """The job ended here (``job_succeeded``, ``job_dead``, ``job_cancelled``,
    ``job_expired``): its remembered retries go, whatever its callable (a lost lease's
    names none)."""
    with _recent_lock:
        _recent.pop(job_id, None)


class TaskFailed(Exception):
    """What ``task_finished`` is sent inside for a FAILED task: the worker's recorded
    failure (``"Type: message"``), so that Django's log line carries it."""


def connect(sender: type) -> None:
    """Observe the worker's lifecycle signals, sending Django's as ``sender`` (idempotent)."""
    _sender[:] = [sender]
    for signal, fn in ((signals.job_started, on_started), (signals.job_retrying, on_retrying),
                       (signals.job_succeeded, on_finished), (signals.job_dead, on_finished),
                       (signals.job_cancelled, forget), (signals.job_expired, forget)):
        signals.observe(signal, fn)
