"""A backend for Django's Tasks framework: ``@task`` functions run on django-delayq.

::

    TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQBackend",
                         "OPTIONS": {"MAX_ATTEMPTS": 5, "BACKOFF": [15, 180, 600, 1800]}}}

``OPTIONS`` sets the job options ``core.options.TASKS`` names (its keys are their names in
upper case), checked by ``core.options.of_tasks`` as ``schedule()`` checks them. A task
runs once by default: Django's Tasks framework promises ``FAILED`` once the function
raised, so retries are opt-in through ``OPTIONS["MAX_ATTEMPTS"]`` (and its ``BACKOFF``),
not inherited from ``DELAYQ["DEFAULT_MAX_ATTEMPTS"]``. Bad options are an
``ImproperlyConfigured`` naming the alias, the key and the value when the backend is built.

``task.enqueue()`` is ``django_delayq.schedule_spec()`` with the task's function path,
so a task's keyword arguments may have any name (the scheduling options stay apart);
its arguments must be JSON (``TypeError`` otherwise, as Django checks them). ``run_after``
may be an aware datetime or a ``timedelta`` (from enqueue time). Results are read from
the audit rows (``django_delayq.tasks_results``), which also sends Django's
``task_started`` / ``task_finished`` from the worker's lifecycle signals. In eager mode
(``DELAYQ["EAGER"]``) in autocommit the task runs before ``enqueue()`` returns, which
returns the finished run (as Django's ``ImmediateBackend``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import router, transaction

from django_delayq import compat, tasks_results  # tasks_results: compat.require_tasks()
from django_delayq.core import api, options, registry
from django_delayq.core.conf import get_settings
from django_delayq.exceptions import InvalidJob
from django_delayq.models import Job, JobAttempt

if TYPE_CHECKING:
    from django_delayq.tasks_results import AnyResult, AnyTask

OPTIONS = frozenset(name.upper() for name in options.TASKS)  # the keys OPTIONS takes


class DelayQBackend(compat.BaseTaskBackend):  # type: ignore[misc]
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True  # -100..100: among due jobs of a queue, higher runs first

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Without QUEUES, the queues of DELAYQ["QUEUES"] are valid (checked per task); with
        # QUEUES [], any name is (Django's rule): a worker serves it with --queues.
        self.own_queues = "QUEUES" in params
        self.any_queue = self.own_queues and not self.queues
        if not self.own_queues:
            self.queues: set[str] = set()
        self.job_options = task_options(alias, self.options)  # of every task it enqueues

    # -- validation ---------------------------------------------------------------

    def validate_task(self, task: AnyTask) -> None:
        if isinstance(task.run_after, timedelta):
            if task.run_after < timedelta(0):
                raise compat.InvalidTask("run_after must not be a negative timedelta, not %r"
                                         % (task.run_after,))
            task = dataclasses.replace(task, run_after=None)
        super().validate_task(task)
        if not self.own_queues and task.queue_name not in (queues := get_settings().queues):
            raise compat.InvalidTask("Queue %r is not in DELAYQ['QUEUES'] %r"
                                     % (task.queue_name, list(queues)))

    def check(self, **kwargs: object) -> Iterable[checks.CheckMessage]:
        if unknown := sorted(set(self.options) - OPTIONS):
            yield checks.Error("TASKS[%r]['OPTIONS'] has unknown key(s) %s" % (self.alias, unknown),
                               hint="Known: %s" % ", ".join(sorted(OPTIONS)), id="delayq.E101")
        try:
            known = get_settings().queues
        except ImproperlyConfigured:  # a bad DELAYQ setting: its own check says it
            return
        if missing := sorted(self.queues - set(known)):  # QUEUES [] (any queue): none missing
            yield checks.Error(
                "TASKS[%r]['QUEUES'] names queue(s) %s that DELAYQ['QUEUES'] %r does not list: "
                "every task enqueued to them would be refused" % (self.alias, missing, list(known)),
                hint="Add them to DELAYQ['QUEUES'], or give the backend QUEUES [] (any queue "
                     "name, each served by a worker started with --queues).", id="delayq.E102")

    # -- enqueue ------------------------------------------------------------------

    def enqueue(self, task: AnyTask, args: Iterable[object],
                kwargs: Mapping[str, object]) -> AnyResult:
        self.validate_task(task)
        if isinstance(task.priority, float):  # a whole number (validate_task): as Django's
            task = dataclasses.replace(task, priority=int(task.priority))  # Task takes it
        json_args = compat.normalize_json(list(args))  # TypeError naming a non-JSON value
        json_kwargs = compat.normalize_json(dict(kwargs))
        after = task.run_after
        spec = api.JobSpec(args=json_args, kwargs=json_kwargs, queue=task.queue_name,
                           delay=after if isinstance(after, timedelta) else None,
                           at=after if isinstance(after, datetime) else None,
                           priority=task.priority).under(self.job_options)
        using = router.db_for_write(Job)
        # Eager mode (DELAYQ["EAGER"]) in autocommit: the task runs when this block commits,
        # after task_enqueued (as Django's ImmediateBackend sends them); the result returned
        # is then the finished run's. In a transaction it runs at its commit: READY here.
        runs_now = get_settings().eager and transaction.get_autocommit(using)
        with transaction.atomic(using=using) if runs_now else contextlib.nullcontext():
            try:
                handle = api.schedule_spec(task.module_path, spec, any_queue=self.any_queue,
                                           task_backend=self.alias)
            except InvalidJob as exc:
                raise compat.InvalidTask(str(exc)) from exc
            # The stored times, so that get_result(result.id) == result.
            created_at, run_at = Job.objects.using(using).filter(
                pk=handle.id).values_list("created_at", "run_at").get()
            if isinstance(task.run_after, timedelta):
                task = dataclasses.replace(task, run_after=run_at)
            result = tasks_results.TaskResult(
                task=task, id=handle.id, status=tasks_results.TaskResultStatus.READY,
                enqueued_at=created_at, started_at=None, finished_at=None,
                last_attempted_at=None, args=json_args, kwargs=json_kwargs, backend=self.alias,
                errors=[], worker_ids=[])
            tasks_results.task_signals.task_enqueued.send(sender=type(self), task_result=result)
        if runs_now:
            result.refresh()
        return result

    # -- results ------------------------------------------------------------------

    def get_result(self, result_id: str) -> AnyResult:
        row = Job.objects.filter(pk=result_id).first()
        if row is None:
            raise compat.TaskResultDoesNotExist(result_id)
        attempts = list(JobAttempt.objects.filter(job_id=row.pk).order_by("number", "pk"))
        return tasks_results.stored_result(row, attempts, self.alias, self.task_class)


def task_options(alias: str, given: dict[str, Any]) -> api.JobOptions:
    """The job options of a backend's ``OPTIONS`` (``options.of_tasks``): one attempt unless
    ``MAX_ATTEMPTS`` asks for more; ``BACKOFF`` (any DELAYQ backoff policy) only with it.
    ``ImproperlyConfigured`` names the bad key."""
    where = "TASKS[%r]['OPTIONS']" % alias
    if not isinstance(given, dict):
        raise ImproperlyConfigured("%s must be a dict (its keys: %s), not %r"
                                   % (where, ", ".join(sorted(OPTIONS)), given))
    try:
        job_options = options.of_tasks(given)
    except InvalidJob as exc:  # the message names the option; the key its OPTIONS key
        raise ImproperlyConfigured("%s[%r]: %s" % (where, str(exc.option).upper(), exc)) from None
    if job_options.backoff is not None and job_options.max_attempts == 1:
        raise ImproperlyConfigured("%s['BACKOFF'] %r has no effect with one attempt: set "
                                   "MAX_ATTEMPTS > 1 to retry" % (where, job_options.backoff))
    return job_options


registry.set_task_caller(tasks_results.task_callable)
tasks_results.connect(DelayQBackend)
