"""Admin actions on jobs. Each calls ``django_delayq.core.api`` once per selected job and
reports what happened per outcome ("3 cancelled, 1 already running").

Every change an action makes is written to the admin's log: one CHANGE ``LogEntry`` per
job, saying what happened to it (``action_log.log_change``); the queues page logs its
changes to queues the same way, so "who paused payments at 03:12?" has an answer
in the admin's history.

"Run now" and "Requeue" make a job run, so they first check the row's callable path
against the allow-list (``registry.check_schedulable``, as ``schedule()`` does): a row
whose path was tampered with, or whose module is no longer listed, is reported "not
allowed" with the reason and left as it is."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_delayq.admin.action_log import Done, Tally, each, log_change
from django_delayq.admin.display import job_link, render
from django_delayq.core import api, registry, validation
from django_delayq.engine.logtext import shown
from django_delayq.engine.outcomes import CancelOutcome, MoveOutcome
from django_delayq.exceptions import InvalidJob
from django_delayq.models import Job, JobStatus, aware_datetime

logger = logging.getLogger(__name__)

CANCELS = {  # outcome: its label, and what the log says (None: nothing changed)
    CancelOutcome.CANCELLED: (gettext_lazy("cancelled"), gettext_lazy("Cancelled.")),
    CancelOutcome.ALREADY_RUNNING: (gettext_lazy("already running (retries cancelled)"),
                                    gettext_lazy("Cancel requested while running: not retried.")),
    CancelOutcome.NOT_FOUND: (gettext_lazy("already finished"), None),
}
MOVE_LABELS = {
    MoveOutcome.MOVED: gettext_lazy("moved"),
    MoveOutcome.ALREADY_RUNNING: gettext_lazy("already running"),
    MoveOutcome.NOT_FOUND: gettext_lazy("not waiting in Redis"),
}
NOT_ALLOWED = gettext_lazy("not allowed")


Row = tuple[str, str]  # (job id, callable path)


PAGE_ROWS = 500


def pages(queryset: QuerySet[Job], *fields: str, size: int | None = None
          ) -> Iterator[list[Any]]:
    """The ``(pk, *fields)`` rows of ``queryset`` in pk order, ``PAGE_ROWS`` at a time,
    each page read in full before the caller writes: memory bounded, not one read kept
    open as ``.iterator()`` keeps it (on SQLite an open read holds its snapshot, and once
    another connection commits, the action's next write fails at once: "database is
    locked"). Up to the largest pk matching at the start: a job the action creates (a
    requeue's copy, a later id) is not acted on in turn; each row is read once."""
    size = size or PAGE_ROWS
    last = queryset.order_by("-pk").values_list("pk", flat=True).first()
    rows = queryset.order_by("pk").values_list("pk", *fields).filter(pk__lte=last)
    page = list(rows[:size]) if last is not None else []
    while page:
        yield page
        page = list(rows.filter(pk__gt=page[-1][0])[:size]) if len(page) == size else []


def _rows(queryset: QuerySet[Job], *fields: str) -> Iterator[Any]:
    for page in pages(queryset, "callable_path", *fields):
        yield from page


def _runnable(queryset: QuerySet[Job], tally: Tally) -> Iterable[Row]:
    """The selected jobs whose callable path the allow-list accepts; the others are
    counted "not allowed", with the reason."""
    for job_id, path in _rows(queryset):
        try:
            registry.check_schedulable(path)
        except InvalidJob as exc:
            logger.warning("admin action refused job %s: %s", shown(job_id), shown(exc))
            tally.fail(job_id, exc, NOT_ALLOWED)
        else:
            yield job_id, path


def _each(modeladmin: admin.ModelAdmin[Job], request: HttpRequest, rows: Iterable[Row],
          call: Callable[[str], Done], *success: object, tally: Tally | None = None) -> Tally:
    """``call`` each job; count the label it returns, log its message, report."""
    return each(modeladmin, request, rows, "job", lambda row: row[0], lambda row: call(row[0]),
                lambda row, message: log_change(request, "%s %s" % (row[1], row[0]), message,
                                                row[0]), *success, tally=tally)


def _move(move: Callable[[str], MoveOutcome], done: object, message: str) -> Callable[[str], Done]:
    """A ``call`` for ``_each`` that moves a job in Redis: ``done`` and ``message`` when
    it moved."""
    def call(job_id: str) -> Done:
        outcome = move(job_id)
        return (done, message) if outcome is MoveOutcome.MOVED else (MOVE_LABELS[outcome], None)
    return call


ALREADY_CANCELLED = gettext_lazy("already cancelled")


@admin.action(description=gettext_lazy("Cancel selected jobs"), permissions=["cancel"])
def cancel_jobs(modeladmin: admin.ModelAdmin[Job], request: HttpRequest,
                queryset: QuerySet[Job]) -> None:
    """Cancel each job; one already cancelled is said so (not "already finished")."""
    tally = Tally()

    def not_cancelled() -> Iterable[Row]:  # one read: each job counted once, whatever
        for job_id, path, status in _rows(queryset, "status"):  # cancels it meanwhile
            if status == JobStatus.CANCELLED:
                tally.add(ALREADY_CANCELLED)
            else:
                yield job_id, path

    def cancel(job_id: str) -> Done:
        label, change = CANCELS[api.cancel(job_id)]
        return label, None if change is None else str(change)

    _each(modeladmin, request, not_cancelled(), cancel, CANCELS[CancelOutcome.CANCELLED][0],
          tally=tally)


@admin.action(description=gettext_lazy("Run selected jobs now"), permissions=["run_now"])
def run_jobs_now(modeladmin: admin.ModelAdmin[Job], request: HttpRequest,
                 queryset: QuerySet[Job]) -> None:
    done, tally = gettext_lazy("due now"), Tally()
    _each(modeladmin, request, _runnable(queryset, tally),
          _move(api.run_now, done, _("Made due now (run now).")), done, tally=tally)


@admin.action(description=gettext_lazy("Requeue selected jobs (finished → a new run)"),
              permissions=["requeue"])
def requeue_jobs(modeladmin: admin.ModelAdmin[Job], request: HttpRequest,
                 queryset: QuerySet[Job]) -> None:
    requeued, as_new = gettext_lazy("requeued"), gettext_lazy("requeued as a new job")
    tally = Tally()
    copies: list[Row] = []

    def requeue(job_id: str) -> Done:
        try:
            handle = api.requeue(job_id)
        except InvalidJob:
            return gettext_lazy("not finished (still live)"), None
        if handle.id == job_id:
            return requeued, _("Requeued with fresh attempts.")
        copies.append((job_id, handle.id))
        return as_new, _("Requeued as a new job %s.") % handle.id

    _each(modeladmin, request, _runnable(queryset, tally), requeue, requeued, as_new,
          tally=tally)
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


MAX_DELAY_SECONDS = 10 * 365 * 24 * 3600


class RescheduleForm(forms.Form):
    """The reschedule form (the list's action, a job's page): a delay in seconds, or a
    date-time."""

    delay = forms.FloatField(
        label=gettext_lazy("Delay (seconds from now)"), required=False, min_value=0,
        max_value=MAX_DELAY_SECONDS, widget=forms.NumberInput(attrs={"step": "any"}))
    at = forms.DateTimeField(
        label=gettext_lazy("Or at (date and time)"), required=False,
        help_text=gettext_lazy("In the current time zone, e.g. 2030-01-31 09:00."),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.errors and (data.get("delay") is None) == (data.get("at") is None):
            raise forms.ValidationError(_("Give either a delay or a date and time, not both."),
                                        code="one_of")
        if data.get("at") is not None:  # what api.reschedule refuses, refused here: a time
            try:  # past year 9999 in UTC, or more than 100 years ahead
                validation.check_at(data["at"], settings.USE_TZ)
            except InvalidJob:
                self.add_error("at", _("Give a time at most 100 years from now (and before "
                                       "the year 10000 in UTC)."))
        return data  # a naive "at" is already aware: DateTimeField reads it in the current zone

    def when(self) -> dict[str, float | datetime]:
        """Keyword arguments for ``api.reschedule``: ``delay=`` or ``at=``."""
        at = self.cleaned_data.get("at")
        return {"delay": float(self.cleaned_data["delay"])} if at is None else {"at": at}

    def describe(self) -> str:
        """The new due time, absolute (it stays true in the admin's log): ``2030-01-31
        09:00:00 UTC``; for a delay, the time it gives from now, and the delay."""
        at = self.cleaned_data.get("at")
        if at is not None:
            return timezone.localtime(aware_datetime(at)).strftime("%Y-%m-%d %H:%M:%S %Z")
        delay = timedelta(seconds=float(self.cleaned_data["delay"]))
        due = timezone.localtime(datetime.now(UTC) + delay)  # aware, with USE_TZ or not
        return "%s (in %s)" % (due.strftime("%Y-%m-%d %H:%M:%S %Z"), delay)


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
    when, moved = form.when(), MOVE_LABELS[MoveOutcome.MOVED]
    tally = _each(modeladmin, request, _rows(queryset), _move(
        lambda job_id: api.reschedule(job_id, **when),  # type: ignore[arg-type]
        moved, _("Rescheduled: due %s.") % form.describe()), moved)
    if tally.counts.get(str(moved)):
        modeladmin.message_user(request, _("New due time: %s.") % form.describe(),
                                messages.INFO)


def _reschedule_page(modeladmin: admin.ModelAdmin[Job], request: HttpRequest,
                     queryset: QuerySet[Job], form: RescheduleForm) -> HttpResponse:
    jobs = list(queryset[:101])
    return render(
        request, modeladmin, "reschedule", _("Reschedule jobs"), form=form, jobs=jobs[:100],
        more=max(0, queryset.count() - 100) if len(jobs) > 100 else 0,
        live_count=queryset.filter(status__in=(JobStatus.SCHEDULED, JobStatus.RETRYING)).count(),
        # the boxes ticked on the list: Django refuses an action posted without one, even
        # when "all N jobs" (select_across) makes it act on the whole filtered list
        selected_ids=request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        action_checkbox_name=helpers.ACTION_CHECKBOX_NAME, action="reschedule_jobs",
        select_across=request.POST.get("select_across", "0"),
        index=request.POST.get("index", "0"))


ACTIONS = [cancel_jobs, run_jobs_now, reschedule_jobs, requeue_jobs]
