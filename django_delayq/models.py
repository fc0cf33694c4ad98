"""Audit rows: the durable record of every job (the outbox)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, overload

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class JobStatus(models.TextChoices):
    SCHEDULED = "scheduled", _("scheduled")  # waiting in Redis for its due time
    RUNNING = "running", _("running")  # claimed by a worker
    RETRYING = "retrying", _("retrying")  # failed, waiting for its next attempt
    SUCCEEDED = "succeeded", _("succeeded")
    DEAD = "dead", _("dead")  # out of attempts, or not runnable; requeueable
    CANCELLED = "cancelled", _("cancelled")
    EXPIRED = "expired", _("expired")  # not started before its expires_at; never ran
    WAITING = "waiting", _("waiting")  # for its parents (after=...); not in Redis yet


# Live in Redis (the reconciler's rows). ``waiting`` is live too but not in Redis until its
# parents release it (core/workflows.py): UNFINISHED_STATUSES holds both.
LIVE_STATUSES = (JobStatus.SCHEDULED, JobStatus.RUNNING, JobStatus.RETRYING)
UNFINISHED_STATUSES = (JobStatus.WAITING, *LIVE_STATUSES)
FINAL_STATUSES = (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.EXPIRED)
FINAL_SQL = ", ".join("'%s'" % status.value for status in FINAL_STATUSES)  # raw SQL's IN (...)


@overload
def db_datetime(value: datetime) -> datetime: ...
@overload
def db_datetime(value: None) -> None: ...
def db_datetime(value: datetime | None) -> datetime | None:
    """``value`` as a row stores it, the one conversion of every datetime written or
    compared in a query: itself with ``USE_TZ`` (or naive, or None); without ``USE_TZ`` an
    aware value's wall time in ``TIME_ZONE``, naive, as Django's own naive ``now()`` (the
    ORM converts nothing there: SQLite and MySQL refuse an aware value, and PostgreSQL's
    ``timestamp without time zone`` takes its time in the connection's zone, ``TIME_ZONE``).
    The worker, the reconciler and the schedules work in aware UTC times."""
    if value is None or value.tzinfo is None or settings.USE_TZ:
        return value
    return timezone.make_naive(value, timezone.get_default_timezone())


def aware_datetime(value: datetime) -> datetime:
    """A datetime read from a row, aware: a naive one (``USE_TZ = False``) is the wall time
    in ``TIME_ZONE`` (``db_datetime``'s inverse), comparable with aware times."""
    if value.tzinfo is not None:
        return value
    return timezone.make_aware(value, timezone.get_default_timezone())


class Job(models.Model):
    id = models.CharField(_("id"), max_length=26, primary_key=True, editable=False)
    queue = models.CharField(_("queue"), max_length=100)
    callable_path = models.CharField(_("callable"), max_length=255)
    args = models.JSONField(_("args"), default=list)
    kwargs = models.JSONField(_("kwargs"), default=dict)
    key = models.CharField(_("idempotency key"), max_length=255, null=True, blank=True)
    status = models.CharField(_("status"), max_length=16, choices=JobStatus.choices,
                              default=JobStatus.SCHEDULED)
    run_at = models.DateTimeField(_("due at"), help_text=_("Due time of the current attempt."))
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    updated_at = models.DateTimeField(_("updated at"), default=timezone.now)
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    max_attempts = models.PositiveIntegerField(_("max attempts"))
    backoff = models.JSONField(_("backoff"), null=True, blank=True)
    error_type = models.CharField(
        _("error type"), max_length=255, blank=True, default="", db_default="",
        help_text=_("Dotted path of the last error's exception class."))
    last_error = models.TextField(_("last error"), blank=True, default="",
                                  help_text=_("Message of the last error."))
    traceback = models.TextField(_("traceback"), blank=True, default="")
    worker_id = models.CharField(_("worker"), max_length=255, blank=True, default="")
    result = models.JSONField(_("result"), null=True, blank=True)
    cancel_requested = models.BooleanField(_("cancel requested"), default=False)
    priority = models.SmallIntegerField(
        _("priority"), default=0, db_default=0,
        help_text=_("-100..100; among due jobs of a queue, higher runs first."))
    timeout = models.FloatField(
        _("time limit (s)"), null=True, blank=True,
        help_text=_("Hard time limit of one attempt, in seconds (empty: the queue's or the "
                    "global default)."))
    expires_at = models.DateTimeField(
        _("expires at"), null=True, blank=True,
        help_text=_("Not started by then: recorded as expired, never run."))
    retry_on = models.JSONField(
        _("retry on"), null=True, blank=True,
        help_text=_("Dotted paths of the exception classes that are retried (empty: any)."))
    scheduled_for = models.DateTimeField(
        _("first due at"), null=True, blank=True,
        help_text=_("The due time asked at schedule(); run_at moves with retries."))
    requeued_from = models.CharField(
        _("requeued from"), max_length=26, null=True, blank=True, db_index=True,
        help_text=_("The job this one was copied from by a requeue."))
    progress = models.JSONField(_("progress"), null=True, blank=True)
    task_backend = models.CharField(
        _("Tasks backend"), max_length=100, blank=True, default="", db_default="",
        help_text=_("Alias of the Django Tasks backend that enqueued the job (empty: "
                    "scheduled through django-delayq's API)."))
    parents_left = models.PositiveIntegerField(
        _("parents left"), default=0, db_default=0,
        help_text=_("Parents (after=...) not finished yet: the job is sent to Redis when "
                    "none is left."))
    group = models.CharField(
        _("group"), max_length=128, blank=True, default="", db_default="",
        help_text=_("The job's group inside its queue (a tenant): due jobs are claimed "
                    "round-robin among groups (empty: no group)."))
    atomic = models.BooleanField(
        _("atomic"), default=False, db_default=False,
        help_text=_("The function runs in one transaction with the write of its success: "
                    "its writes to this database commit once."))

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "run_at"], name="delayq_status_run_at"),
            models.Index(fields=["queue", "status"], name="delayq_queue_status"),
            models.Index(fields=["created_at"], name="delayq_created_at"),
            models.Index(fields=["callable_path"], name="delayq_callable"),
            # the rows of one group (purge_group, the admin's filter); rows without a
            # group are not in it, so they cost it nothing
            models.Index(fields=["queue", "group", "status"], condition=~Q(group=""),
                         name="delayq_queue_group_status"),
        ]
        permissions = [
            ("cancel_job", _("Can cancel jobs")),
            ("run_job_now", _("Can run jobs now")),
            ("reschedule_job", _("Can reschedule jobs")),
            ("requeue_job", _("Can requeue jobs")),
            ("view_report", _("Can view the Spark report")),
            ("pause_queue", _("Can pause and resume queues")),
            ("purge_queue", _("Can purge queues")),
        ]

    def __str__(self) -> str:
        return "%s %s [%s]" % (self.callable_path, self.id, self.status)

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    def lateness_ms(self) -> float | None:
        """Start minus due time of the attempt this row last started (docs/pipeline.md,
        "Lateness"). None before a start, and while ``retrying`` or ``cancelled``: a retry
        moves ``run_at`` to the next attempt's due time, so the row no longer holds the due
        time of the attempt that ``started_at`` belongs to."""
        measured = (JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.DEAD)
        if self.started_at is None or self.status not in measured:
            return None
        return (self.started_at - self.run_at).total_seconds() * 1000

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "queue": self.queue, "callable": self.callable_path,
                "status": self.status, "attempts": self.attempts}


JOB_COLUMNS = {f.name: str(f.column) for f in Job._meta.concrete_fields}  # of raw SQL


class JobAttempt(models.Model):
    """One failed or lost delivery of a job (successful attempts live on the job row)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempt_history",
                            db_constraint=False)
    number = models.PositiveIntegerField(_("attempt"))
    outcome = models.CharField(_("outcome"), max_length=16, choices=JobStatus.choices)
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), default=timezone.now)
    error_type = models.CharField(_("error type"), max_length=255, blank=True, default="",
                                  db_default="")
    error = models.TextField(_("error"), blank=True, default="")
    traceback = models.TextField(_("traceback"), blank=True, default="")
    worker_id = models.CharField(_("worker"), max_length=255, blank=True, default="")

    class Meta:
        verbose_name = _("job attempt")
        verbose_name_plural = _("job attempts")
        ordering = ["job", "number"]

    def __str__(self) -> str:
        return "%s #%d %s" % (self.job_id, self.number, self.outcome)


class JobDependency(models.Model):
    """``child`` waits for ``parent`` (``schedule(..., after=[parent])``): core/workflows.py.

    ``resolved`` turns true, once, in the transaction that makes the parent's row final;
    that transaction decrements the child's ``parents_left`` by the edges it resolved."""

    parent_id = models.CharField(_("parent"), max_length=26)  # indexed by the constraint
    child_id = models.CharField(_("child"), max_length=26, db_index=True)
    resolved = models.BooleanField(_("resolved"), default=False)
    run_on_failure = models.BooleanField(
        _("run on failure"), default=False,
        help_text=_("The child runs even if this parent ends dead, cancelled or expired."))

    class Meta:
        verbose_name = _("job dependency")
        verbose_name_plural = _("job dependencies")
        constraints = [models.UniqueConstraint(fields=["parent_id", "child_id"],
                                               name="delayq_dependency_unique")]
        indexes = [models.Index(fields=["resolved", "parent_id"], name="delayq_dependency_open")]

    def __str__(self) -> str:
        return "%s -> %s" % (self.parent_id, self.child_id)


class JobKey(models.Model):
    """Which job holds a key scheduled with ``on_conflict="replace"`` or ``"drop"``
    (core/workflows.py): one row per (queue, key) ever used so, whose row lock orders the
    calls of that key. ``job_id`` may name a job that finished or was deleted: the key
    is then free, taken over by the next call."""

    queue = models.CharField(_("queue"), max_length=100)
    key = models.CharField(_("key"), max_length=255)
    job_id = models.CharField(_("holder"), max_length=26)

    class Meta:
        verbose_name = _("job key")
        verbose_name_plural = _("job keys")
        constraints = [models.UniqueConstraint(fields=["queue", "key"],
                                               name="delayq_jobkey_unique")]
        # Retention deletes the key rows of the jobs it deletes (worker/retention.py).
        indexes = [models.Index(fields=["job_id"], name="delayq_jobkey_holder")]

    def __str__(self) -> str:
        return "%s/%s -> %s" % (self.queue, self.key, self.job_id)


class GroupLimit(models.Model):
    """One group's limits where they differ from its queue's defaults
    (``QUEUE_OPTIONS[q]["group_concurrency"]``, ``["group_rate_limit"]``; docs/groups.md,
    "Limits"): the durable copy of the override Redis enforces (``core/group_limits.py``
    writes both; the reconciler writes Redis again from these rows). An empty field keeps
    the queue's default."""

    queue = models.CharField(_("queue"), max_length=100)
    group = models.CharField(_("group"), max_length=128)
    concurrency = models.PositiveIntegerField(_("concurrency"), null=True, blank=True)
    rate_limit = models.CharField(_("rate limit"), max_length=32, blank=True, default="")
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("group limit")
        verbose_name_plural = _("group limits")
        constraints = [models.UniqueConstraint(fields=["queue", "group"],
                                               name="delayq_grouplimit_unique")]

    def __str__(self) -> str:
        return "%s/%s" % (self.queue, self.group)


class QueuePause(models.Model):
    """A queue, or one group of it (``group`` not empty), paused by an operator
    (``pause_queue``, ``pause_group``): the durable copy of the pause Redis enforces
    (``core/pauses.py`` writes the row, then Redis; the reconciler writes Redis again from
    these rows, before a lost queue's jobs are re-enqueued). Deleted by the resume."""

    queue = models.CharField(_("queue"), max_length=100)
    group = models.CharField(_("group"), max_length=128, blank=True, default="")
    paused_at = models.DateTimeField(_("paused at"), default=timezone.now)

    class Meta:
        verbose_name = _("queue pause")
        verbose_name_plural = _("queue pauses")
        constraints = [models.UniqueConstraint(fields=["queue", "group"],
                                               name="delayq_queuepause_unique")]

    def __str__(self) -> str:
        return "%s/%s" % (self.queue, self.group) if self.group else self.queue


class StoppedWorker(models.Model):
    """A worker that drained and wrote its whole audit buffer, but could not take itself
    out of Redis's workers registry (Redis was unreachable as it stopped): its entry
    stays there and falls silent like a crashed worker's. Reconcilers read this row to
    know that silence hides no unrecorded run (``core/reconcile_state.py``, ``Liveness``).
    Written at the stop; deleted when the registry forgets the entry
    (``worker/retention.py``)."""

    worker_id = models.CharField(_("worker"), max_length=255, primary_key=True)
    stopped_at = models.DateTimeField(_("stopped at"), default=timezone.now)

    class Meta:
        verbose_name = _("stopped worker")
        verbose_name_plural = _("stopped workers")

    def __str__(self) -> str:
        return "%s stopped %s" % (self.worker_id, self.stopped_at)


class MissedPolicy(models.TextChoices):
    SKIP = "skip", _("skip: next future tick only")
    ONCE = "once", _("once: run one missed tick, then go on")


# The idempotency key of a schedule's tick jobs starts so (core/periodic.py): a worker that
# starts such a job creates the schedule's next tick then (core/payloads.py reads the key).
TICK_KEY_PREFIX = "delayq.tick:"


class Schedule(models.Model):
    """A periodic job: a cron expression or an interval, materialised one tick at a time as
    an ordinary keyed job (core/periodic.py; docs/periodic.md)."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    callable_path = models.CharField(_("callable"), max_length=255)
    args = models.JSONField(_("args"), default=list, blank=True)
    kwargs = models.JSONField(_("kwargs"), default=dict, blank=True)
    queue = models.CharField(_("queue"), max_length=100, blank=True, default="",
                             help_text=_("Empty: the default queue."))
    priority = models.SmallIntegerField(_("priority"), default=0)
    group = models.CharField(_("group"), max_length=128, blank=True, default="",
                             db_default="", help_text=_("Its jobs' group (empty: none)."))
    atomic = models.BooleanField(
        _("atomic"), default=False, db_default=False,
        help_text=_("Each tick's job runs in one transaction with the write of its success."))
    cron = models.CharField(
        _("cron"), max_length=100, blank=True, default="",
        help_text=_("Five fields or an alias such as @daily, in the schedule's time zone."))
    interval_seconds = models.PositiveIntegerField(
        _("interval (s)"), null=True, blank=True, help_text=_("Instead of a cron expression."))
    time_zone = models.CharField(_("time zone"), max_length=64, default="UTC",
                                help_text=_("IANA name, e.g. Europe/Berlin."))
    start_at = models.DateTimeField(_("start"), null=True, blank=True)
    end_at = models.DateTimeField(_("end"), null=True, blank=True)
    jitter_seconds = models.PositiveIntegerField(
        _("jitter (s)"), default=0, help_text=_("Each tick's job is due up to this much later."))
    enabled = models.BooleanField(_("enabled"), default=True)
    missed = models.CharField(_("missed runs"), max_length=8, choices=MissedPolicy.choices,
                              default=MissedPolicy.SKIP)
    from_settings = models.BooleanField(
        _("from settings"), default=False, editable=False,
        help_text=_("Defined in DELAYQ['SCHEDULES']: synced at worker start."))
    version = models.PositiveIntegerField(_("version"), default=1, editable=False)
    next_tick_at = models.DateTimeField(_("next tick"), null=True, blank=True, editable=False)
    next_job_id = models.CharField(_("next tick's job"), max_length=26, blank=True, default="",
                                   editable=False)
    last_tick_at = models.DateTimeField(_("last tick"), null=True, blank=True, editable=False)
    last_job_id = models.CharField(_("last tick's job"), max_length=26, blank=True,
                                   default="", editable=False)
    created_at = models.DateTimeField(_("created at"), default=timezone.now, editable=False)
    updated_at = models.DateTimeField(_("updated at"), default=timezone.now, editable=False)

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
