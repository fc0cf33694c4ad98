"""Periodic schedules in the admin: operators add, edit, enable or disable them (Django's
model permissions: add/change/delete/view ``schedule``). A save takes effect on the next
tick: the materialised future tick's job is cancelled and the next one is created from the
new definition (core/periodic.py). Schedules from ``DELAYQ["SCHEDULES"]`` are read-only
here except ``enabled``: their definition lives in the settings and is synced at worker
start. The callable is picked from the job functions of ``DELAYQ["ALLOWED_CALLABLES"]``;
tick times are shown to the second in the viewer's time zone, with the schedule's in
their title and on its page; the last tick's job is linked with its status.

Actions: run now, enable, disable. Each needs Django's ``change_schedule`` permission,
works for schedules from ``DELAYQ["SCHEDULES"]`` too (``enabled`` is theirs to set),
reports per outcome ("2 disabled, 1 already disabled") and writes one ``LogEntry``
(CHANGE) per schedule it changed (``ModelAdmin.log_change``). *Run now* schedules one job
now with the schedule's callable, arguments, queue, priority and ``atomic``, beside its
ticks (the next tick stays due when it was); *enable* and *disable* go through
``periodic.replace``, as a save of the form does: disabling cancels the materialised next
tick's job, enabling materialises the next tick."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.db.models import OuterRef, QuerySet, Subquery
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, gettext_lazy
from django.utils.translation import gettext_lazy as _

from django_delayq.admin import display
from django_delayq.admin.action_log import Done, each
from django_delayq.admin.display import column, job_link, short_seconds, status_badge, zoned
from django_delayq.core import api, periodic, registry, schedules, validation
from django_delayq.core.options import JobSpec
from django_delayq.exceptions import DelayQError, InvalidJob
from django_delayq.models import Job, JobStatus, Schedule, aware_datetime

if TYPE_CHECKING:  # generic for the type checker only: Django's classes take no [...]
    _ScheduleFormBase = forms.ModelForm[Schedule]
    _ScheduleAdminBase = admin.ModelAdmin[Schedule]
else:
    _ScheduleFormBase = forms.ModelForm
    _ScheduleAdminBase = admin.ModelAdmin


DEFINITION = ("name", "callable_path", "args", "kwargs", "queue", "priority", "group", "atomic",
              "cron", "interval_seconds", "time_zone", "start_at", "end_at", "jitter_seconds",
              "missed")


class ArgumentsField(forms.JSONField):
    """A JSON form field whose nesting is measured before the text is parsed: deeper
    than ``validation.MAX_DEPTH`` (as ``schedule()`` refuses) is a form error, where
    parsing it would exhaust the stack (thousands of levels: a server error)."""

    def to_python(self, value: object) -> Any:
        if isinstance(value, str) and validation.too_deep(value):
            raise forms.ValidationError(
                _("JSON nested more than %(depth)d levels deep; a job takes at most that."),
                code="too_deep", params={"depth": validation.MAX_DEPTH})
        return super().to_python(value)

    def bound_data(self, data: object, initial: object) -> Any:
        if isinstance(data, str) and validation.too_deep(data):
            return InvalidJSONInput(data)  # shown back as typed, never parsed
        return super().bound_data(data, initial)


class ScheduleForm(_ScheduleFormBase):
    class Meta:
        model = Schedule
        fields = [*DEFINITION, "enabled"]
        field_classes = {"args": ArgumentsField, "kwargs": ArgumentsField}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "callable_path" in self.fields:  # a picker of the allowed job functions
            self.fields["callable_path"] = forms.ChoiceField(
                label=_("callable"), choices=job_functions(self.instance.callable_path),
                help_text=_("A job function of a module in DELAYQ['ALLOWED_CALLABLES']."))

    def clean(self) -> dict[str, Any]:
        """Checks the definition as it will be saved: the fields of the form over the
        schedule's own values (a schedule from settings has only ``enabled`` here)."""
        data = super().clean() or {}
        values = {f: getattr(self.instance, f) for f in DEFINITION}
        values.update({f: data.get(f) for f in DEFINITION if f in self.fields})
        if "callable_path" in self.fields and values["callable_path"] is None:
            # not one of the choices: the check names the value posted, as manage.py
            # check names the setting's
            values["callable_path"] = self.data.get(self.add_prefix("callable_path"), "")
        probe = Schedule(**values)
        probe.args = values["args"] if values["args"] is not None else []
        probe.kwargs = values["kwargs"] if values["kwargs"] is not None else {}
        probe.cron = values["cron"] or ""
        try:
            periodic.check(probe)  # a start more than 100 years ahead too
        except InvalidJob as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


def job_functions(current: str = "") -> list[tuple[str, str]]:
    """The job functions of ``DELAYQ["ALLOWED_CALLABLES"]`` (public top-level functions
    of each listed module that the allow-list accepts), as form choices; ``current``
    first when it is not one (a schedule whose function has gone stays editable)."""
    found: set[str] = set()
    for module in sorted(registry.allowed_modules()):
        try:
            names = list(vars(importlib.import_module(module)))
        except ImportError:
            continue
        found.update(path for path in ("%s.%s" % (module, n) for n in names
                                       if not n.startswith("_")) if _is_job(path))
    choices = [("", "---------")] + [(p, p) for p in sorted(found)]
    if current and current not in found:
        choices.insert(1, (current, current))
    return choices


def _is_job(path: str) -> bool:
    try:
        registry.job_object(path)
    except (registry.NotAllowed, ImportError, AttributeError):
        return False
    return True


def _tick(value: datetime | None, zone: str,
          show: Callable[[datetime], str] = display.seconds) -> str:
    """A tick time to the second in the viewer's zone (``show``: ``seconds``, or
    ``short_seconds`` in the list); beside it, when the schedule's zone differs, the same
    time there (``= 02:00:00 CET``; the date and zone name in a title)."""
    if value is None:
        return "-"
    value = aware_datetime(value)  # naive: a row's time under USE_TZ = False
    try:
        there = value.astimezone(schedules.zone_of(zone))
    except InvalidJob:
        return str(show(value))
    here = timezone.localtime(value)
    if there.utcoffset() == here.utcoffset() and zone == str(here.tzinfo):
        return str(show(value))
    return format_html('{} <span class="delayq-there" title="{}">= {} {}</span>',
                       show(value), zoned(there), there.strftime("%H:%M:%S"),
                       there.strftime("%Z"))


def _linked_tick(value: datetime | None, zone: str, job_id: str) -> str:
    """For the list: the tick (``short_seconds``) linked to its job, when it has one."""
    shown = _tick(value, zone, short_seconds)
    return job_link(job_id, shown) if job_id else shown


# -- actions: run now, enable, disable ---------------------------------------------------

def _each(modeladmin: admin.ModelAdmin[Schedule], request: HttpRequest,
          queryset: QuerySet[Schedule], call: Callable[[Schedule], Done], *success: object
          ) -> None:
    """``call`` each schedule, count its outcomes, log its changes and report."""
    each(modeladmin, request, queryset, "schedule", lambda s: s.name, call,
         lambda s, message: modeladmin.log_change(request, s, message), *success)


def _set_enabled(modeladmin: admin.ModelAdmin[Schedule], request: HttpRequest,
                 queryset: QuerySet[Schedule], enabled: bool) -> None:
    """Through ``periodic.replace``; an error leaves it saved (the keeper pass catches up)."""
    done = gettext_lazy("enabled") if enabled else gettext_lazy("disabled")
    already = gettext_lazy("already enabled") if enabled else gettext_lazy("already disabled")

    def call(s: Schedule) -> Done:
        if s.enabled == enabled:
            return already, None
        if periodic.replace(s, {"enabled": enabled}):
            return done, gettext("Enabled.") if enabled else gettext("Disabled.")
        return gettext_lazy("changed meanwhile (reload and try again)"), None
    _each(modeladmin, request, queryset, call, done, already)


@admin.action(description=gettext_lazy("Enable selected schedules"), permissions=["change"])
def enable_schedules(modeladmin: admin.ModelAdmin[Schedule], request: HttpRequest,
                     queryset: QuerySet[Schedule]) -> None:
    _set_enabled(modeladmin, request, queryset, True)


@admin.action(description=gettext_lazy("Disable selected schedules"), permissions=["change"])
def disable_schedules(modeladmin: admin.ModelAdmin[Schedule], request: HttpRequest,
                      queryset: QuerySet[Schedule]) -> None:
    _set_enabled(modeladmin, request, queryset, False)


def run_once(s: Schedule) -> str:
    """One job of ``s`` due now with its ticks' options (not a tick: its key is none);
    returns its id."""
    spec = JobSpec(args=list(s.args or []), kwargs=dict(s.kwargs or {}))
    return api.schedule_spec(s.callable_path, spec.under(periodic.job_options(s))).id


@admin.action(description=gettext_lazy("Run selected schedules now (one job each)"),
              permissions=["change"])
def run_schedules_now(modeladmin: admin.ModelAdmin[Schedule], request: HttpRequest,
                      queryset: QuerySet[Schedule]) -> None:
    started = gettext_lazy("scheduled to run now")
    created: list[tuple[str, str]] = []

    def call(s: Schedule) -> Done:
        created.append((s.name, run_once(s)))
        return started, gettext("Run now as job %s.") % created[-1][1]
    _each(modeladmin, request, queryset, call, started)
    if created:
        site = modeladmin.admin_site.name
        links = format_html_join(", ", "{}: {}", (
            (name, job_link(job_id, site=site)) for name, job_id in created[:10]))
        modeladmin.message_user(request, format_html("{} {}", gettext("New jobs:"), links),
                                messages.INFO)


SCHEDULE_ACTIONS = [run_schedules_now, enable_schedules, disable_schedules]


@admin.register(Schedule)
class ScheduleAdmin(_ScheduleAdminBase):
    form = ScheduleForm
    list_display = ("name", "enabled", "rule", "next_tick", "last_tick", "last_outcome",
                    "from_settings")
    list_filter = ("enabled", "missed", "from_settings")
    search_fields = ("name", "callable_path")
    actions = SCHEDULE_ACTIONS
    readonly_fields = ("from_settings", "next_tick_at_zones", "next_job",
                       "last_tick_at_zones", "last_job", "last_outcome", "version")

    class Media:
        css = {"all": ("django_delayq/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> Any:
        """With the last tick's job status (one subquery, no query per row)."""
        status = Job.objects.filter(pk=OuterRef("last_job_id")).values("status")[:1]
        return super().get_queryset(request).annotate(last_status=Subquery(status))

    @admin.display(description=_("when"))
    def rule(self, obj: Schedule) -> str:
        what = obj.cron or "every %s s" % obj.interval_seconds
        return what if obj.time_zone == "UTC" or not obj.cron else "%s (%s)" % (
            what, obj.time_zone)

    next_tick = column(_("next tick"), lambda s: _linked_tick(s.next_tick_at, s.time_zone,
                                                              s.next_job_id), "next_tick_at")
    last_tick = column(_("last tick"), lambda s: _linked_tick(s.last_tick_at, s.time_zone,
                                                              s.last_job_id), "last_tick_at")
    next_tick_at_zones = column(_("next tick"), lambda s: _tick(s.next_tick_at, s.time_zone))
    last_tick_at_zones = column(_("last tick"), lambda s: _tick(s.last_tick_at, s.time_zone))
    next_job = column(_("next tick's job"), lambda s: job_link(s.next_job_id))
    last_job = column(_("last tick's job"), lambda s: job_link(s.last_job_id))

    @admin.display(description=_("last outcome"))
    def last_outcome(self, obj: Schedule) -> Any:
        """The status of the last tick's job, linked to it."""
        status = getattr(obj, "last_status", None)  # job_link: "-" without a job
        return job_link(obj.last_job_id, _("(no row)") if status is None
                        else status_badge(status, JobStatus(status).label))

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        if obj is not None and obj.from_settings:  # defined in settings: only ``enabled``
            return (*DEFINITION, *self.readonly_fields)
        return self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Schedule, form: forms.ModelForm[Schedule],
                   change: bool) -> None:
        """A new schedule is saved whole. An edit writes the definition and ``enabled``
        only (``periodic.replace``): the tick fields (``next_job_id`` ...) are the
        workers', and a full save would write back the values read when the POST began,
        over a tick a worker started meanwhile (whose job the replace would then cancel
        as the pending one, leaving the pending one to run beside the new version's)."""
        try:
            if not change:
                super().save_model(request, obj, form, change)
                periodic.keep(obj)
                return
            values = {f: getattr(obj, f) for f in (*DEFINITION, "enabled")}
            if not periodic.replace(obj, values):
                self.message_user(request, "Not saved: the schedule was changed meanwhile "
                                  "(another save, or a settings sync); reload it and edit "
                                  "again.", messages.ERROR)
        except DelayQError as exc:  # Redis down: the workers' keeper pass catches up
            self.message_user(request, "Saved; the next tick is not materialised yet: %s"
                              % exc, messages.WARNING)

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        periodic.cancel_pending(obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for obj in queryset:
            periodic.cancel_pending(obj)
        super().delete_queryset(request, queryset)
