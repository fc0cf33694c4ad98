"""Admin actions on jobs. Each calls ``django_delayq.core.api`` once per selected job and
reports what happened per outcome ("3 cancelled, 1 already running").

Every change an action makes is written to the admin's log (``audit``): one CHANGE
``LogEntry`` per job, saying what happened to it.

"Run now" and "Requeue" make a job run, so they first check the row's callable path
against the allow-list (``registry.check_schedulable``, as ``schedule()`` does): a row
whose path was tampered with, or whose module is no longer listed, is reported "not
allowed" with the reason and left as it is."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from redis.exceptions import RedisError

from django_delayq.admin import action_log, pages
from django_delayq.admin.display import job_link
from django_delayq.admin.forms import RescheduleForm
from django_delayq.core import api, registry
from django_delayq.engine.outcomes import CancelOutcome, MoveOutcome
from django_delayq.exceptions import DelayQError, InvalidJob, JobNotFound
from django_delayq.models import Job, JobStatus

logger = logging.getLogger(__name__)

CANCEL_LABELS = {
    CancelOutcome.CANCELLED: gettext_lazy("cancelled"),
    CancelOutcome.ALREADY_RUNNING: gettext_lazy("already running (retries cancelled)"),
    CancelOutcome.NOT_FOUND: gettext_lazy("already finished"),
}
MOVE_LABELS = {
    MoveOutcome.MOVED: gettext_lazy("moved"),
    MoveOutcome.ALREADY_RUNNING: gettext_lazy("already running"),
    MoveOutcome.NOT_FOUND: gettext_lazy("not waiting in Redis"),
}
ERROR = gettext_lazy("failed")
NOT_ALLOWED = gettext_lazy("not allowed")
GONE = gettext_lazy("no longer exist")


class Tally:
    """Counts outcome labels and renders them most common first: "3 cancelled, 1 failed"."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.errors: list[str] = []

    def add(self, label: object) -> None:
        self.counts[str(label)] += 1

    def fail(self, job_id: str, exc: Exception, label: object = ERROR) -> None:
        self.add(label)
        self.errors.append("%s: %s" % (job_id, exc))

    def text(self) -> str:
        return ", ".join("%d %s" % (n, label) for label, n in self.counts.most_common()) or _(
            "nothing")

    def report(self, modeladmin: admin.ModelAdmin[Any], request: HttpRequest,
               *success: object) -> None:
        """SUCCESS when every outcome is one of ``success``, else WARNING; errors listed."""
        ok = bool(self.counts) and set(self.counts) <= {str(label) for label in success}
        level = messages.SUCCESS if ok else messages.WARNING
        modeladmin.message_user(request, self.text() + ".", level)
        if self.errors:
            shown = "; ".join(self.errors[:5]) + ("…" if len(self.errors) > 5 else "")
            modeladmin.message_user(request, _("Errors: %s") % shown, messages.ERROR)


Row = tuple[str, str]  # (job id, callable path)


def _rows(queryset: QuerySet[Job]) -> Iterable[Row]:
    return queryset.values_list("pk", "callable_path").iterator()


def _runnable(queryset: QuerySet[Job], tally: Tally) -> Iterable[Row]:
    """The selected jobs whose callable path the allow-list accepts; the others are
    counted "not allowed", with the reason."""
    for job_id, path in _rows(queryset):
        try:
            registry.check_schedulable(path)
        except InvalidJob as exc:
            logger.warning("admin action refused job %s: %s", job_id, exc)
            tally.fail(job_id, exc, NOT_ALLOWED)
        else:
            yield job_id, path


def _each(request: HttpRequest, rows: Iterable[Row], call: Callable[[str], Any], tally: Tally,
          label_of: Callable[[Any], Any], changed: Callable[[Any], str | None]) -> None:
    """``call`` each job; count its outcome's label and log what ``changed`` says."""
    for job_id, path in rows:
        try:
            outcome = call(job_id)
        except JobNotFound:
            tally.add(GONE)
        except (DelayQError, RedisError) as exc:
            logger.warning("admin action on job %s failed: %s", job_id, exc)
            tally.fail(job_id, exc)
        else:
            tally.add(label_of(outcome))
            message = changed(outcome)
            if message:
                action_log.log_job(request, job_id, path, message)


def _cancel_change(outcome: CancelOutcome) -> str | None:
    if outcome is CancelOutcome.CANCELLED:
        return _("Cancelled.")
    if outcome is CancelOutcome.ALREADY_RUNNING:
        return _("Cancel requested while running: not retried.")
    return None


ALREADY_CANCELLED = gettext_lazy("already cancelled")


@admin.action(description=gettext_lazy("Cancel selected jobs"), permissions=["cancel"])
def cancel_jobs(modeladmin: admin.ModelAdmin[Job], request: HttpRequest,
                queryset: QuerySet[Job]) -> None:
    """Cancel each job; one already cancelled is said so (not "already finished")."""
    tally = Tally()

    def not_cancelled() -> Iterable[Row]:
        for job_id, path, status in queryset.values_list(
                "pk", "callable_path", "status").iterator():
            if status == JobStatus.CANCELLED:
                tally.add(ALREADY_CANCELLED)
            else:
                yield job_id, path

    _each(request, not_cancelled(), api.cancel, tally, CANCEL_LABELS.__getitem__,
          _cancel_change)
    tally.report(modeladmin, request, CANCEL_LABELS[CancelOutcome.CANCELLED])


def _moved(message: str) -> Callable[[MoveOutcome], str | None]:
    return lambda outcome: message if outcome is MoveOutcome.MOVED else None


@admin.action(description=gettext_lazy("Run selected jobs now"), permissions=["run_now"])
def run_jobs_now(modeladmin: admin.ModelAdmin[Job], request: HttpRequest,
                 queryset: QuerySet[Job]) -> None:
    labels = {**MOVE_LABELS, MoveOutcome.MOVED: gettext_lazy("due now")}
    tally = Tally()
    _each(request, _runnable(queryset, tally), api.run_now, tally, labels.__getitem__,
          _moved(_("Made due now (run now).")))
    tally.report(modeladmin, request, labels[MoveOutcome.MOVED])


@admin.action(description=gettext_lazy("Requeue selected jobs (finished → a new run)"),
              permissions=["requeue"])
def requeue_jobs(modeladmin: admin.ModelAdmin[Job], request: HttpRequest,
                 queryset: QuerySet[Job]) -> None:
    requeued, as_new = gettext_lazy("requeued"), gettext_lazy("requeued as a new job")
    not_final = gettext_lazy("not finished (still live)")
    tally = Tally()
    copies: list[Row] = []
    for job_id, path in _runnable(queryset, tally):
        try:
            handle = api.requeue(job_id)
        except InvalidJob:
            tally.add(not_final)
        except JobNotFound:
            tally.add(GONE)
        except (DelayQError, RedisError) as exc:
            tally.fail(job_id, exc)
        else:
            same = handle.id == job_id
            tally.add(requeued if same else as_new)
            action_log.log_job(request, job_id, path, _("Requeued with fresh attempts.") if same
                          else _("Requeued as a new job %s.") % handle.id)
            if not same:
                copies.append((job_id, handle.id))
    tally.report(modeladmin, request, requeued, as_new)
    if copies:
        modeladmin.message_user(request, _new_jobs_message(modeladmin, copies), messages.INFO)


NEW_JOBS_LISTED = 10


def _new_jobs_message(modeladmin: admin.ModelAdmin[Job], copies: list[Row]) -> str:
    """ "Requeued as a new job: NEW (from OLD), ..." with each id linking to its page."""
    site = modeladmin.admin_site.name
    shown = format_html_join(", ", "{} ({} {})", (
        (job_link(new, site=site), _("from"), job_link(old, site=site))
        for old, new in copies[:NEW_JOBS_LISTED]))
    more = "" if len(copies) <= NEW_JOBS_LISTED else " …"
    return format_html("{}: {}{}", _("Requeued as a new job"), shown, more)


@admin.action(description=gettext_lazy("Reschedule selected jobs…"), permissions=["reschedule"])
def reschedule_jobs(modeladmin: admin.ModelAdmin[Job], request: HttpRequest,
                    queryset: QuerySet[Job]) -> HttpResponse | None:
    """Two steps: the action shows a form (delay or date-time); "apply" performs it."""
    form = RescheduleForm(request.POST if "apply" in request.POST else None)
    if "apply" in request.POST and form.is_valid():
        reschedule(modeladmin, request, queryset, form)
        return HttpResponseRedirect(request.get_full_path())
    return _reschedule_page(modeladmin, request, queryset, form)


def reschedule(modeladmin: admin.ModelAdmin[Job], request: HttpRequest, queryset: QuerySet[Job],
               form: RescheduleForm) -> None:
    """Move the jobs of ``queryset`` to the valid ``form``'s time, reported and logged
    (the list's action, and the button on a job's page)."""
    when = form.when()
    tally = Tally()
    _each(request, _rows(queryset),
          lambda job_id: api.reschedule(job_id, **when),  # type: ignore[arg-type]
          tally, MOVE_LABELS.__getitem__,
          _moved(_("Rescheduled: due %s.") % form.describe()))
    tally.report(modeladmin, request, MOVE_LABELS[MoveOutcome.MOVED])
    if tally.counts.get(str(MOVE_LABELS[MoveOutcome.MOVED])):
        modeladmin.message_user(request, _("New due time: %s.") % form.describe(),
                                messages.INFO)


def _reschedule_page(modeladmin: admin.ModelAdmin[Job], request: HttpRequest,
                     queryset: QuerySet[Job], form: RescheduleForm) -> HttpResponse:
    jobs = list(queryset[:101])
    return pages.render(
        request, modeladmin, "reschedule", _("Reschedule jobs"),
        app_label=modeladmin.model._meta.app_label, form=form, jobs=jobs[:100],
        more=max(0, queryset.count() - 100) if len(jobs) > 100 else 0,
        live_count=queryset.filter(status__in=(JobStatus.SCHEDULED, JobStatus.RETRYING)).count(),
        selected_ids=[] if request.POST.get("select_across") == "1" else
        queryset.values_list("pk", flat=True),
        action_checkbox_name=helpers.ACTION_CHECKBOX_NAME, action="reschedule_jobs",
        select_across=request.POST.get("select_across", "0"),
        index=request.POST.get("index", "0"))


ACTIONS = [cancel_jobs, run_jobs_now, reschedule_jobs, requeue_jobs]
