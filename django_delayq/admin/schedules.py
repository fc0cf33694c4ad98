"""Periodic schedules in the admin: operators add, edit, enable or disable them (Django's
model permissions: add/change/delete/view ``schedule``). A save takes effect on the next
tick: the materialised future tick's job is cancelled and the next one is created from the
new definition (core/periodic.py). Schedules from ``DELAYQ["SCHEDULES"]`` are read-only
here except ``enabled``: their definition lives in the settings and is synced at worker
start."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from django_delayq.core import periodic, schedules, validation
from django_delayq.exceptions import DelayQError, InvalidJob
from django_delayq.models import Schedule

DEFINITION = ("name", "callable_path", "args", "kwargs", "queue", "priority", "cron",
              "interval_seconds", "time_zone", "start_at", "end_at", "jitter_seconds",
              "missed")


class ArgumentsField(forms.JSONField):
    """A JSON form field whose nesting is measured before the text is parsed: deeper
    than ``validation.MAX_DEPTH`` (as ``schedule()`` refuses) is a form error, where
    parsing it would exhaust the stack (thousands of levels: a server error)."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and validation.too_deep(value):
            raise forms.ValidationError(
                _("JSON nested more than %(depth)d levels deep; a job takes at most that."),
                code="too_deep", params={"depth": validation.MAX_DEPTH})
        return super().to_python(value)

    def bound_data(self, data: Any, initial: Any) -> Any:
        if isinstance(data, str) and validation.too_deep(data):
            return InvalidJSONInput(data)  # shown back as typed, never parsed
        return super().bound_data(data, initial)


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = [*DEFINITION, "enabled"]
        field_classes = {"args": ArgumentsField, "kwargs": ArgumentsField}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        probe = Schedule(**{f: data.get(f) for f in DEFINITION if f in data})
        probe.args = data.get("args") if data.get("args") is not None else []
        probe.kwargs = data.get("kwargs") if data.get("kwargs") is not None else {}
        probe.cron = data.get("cron") or ""
        try:
            periodic.check(probe)
            schedules.check_start(probe.start_at, timezone.now())
        except InvalidJob as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


def _job_link(job_id: str) -> Any:
    if not job_id:
        return "-"
    url = reverse("admin:django_delayq_job_change", args=[job_id])
    return format_html('<a href="{}">{}</a>', url, job_id)


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = ("name", "enabled", "rule", "time_zone", "next_tick_at", "next_job",
                    "last_tick_at", "last_job", "missed", "from_settings")
    list_filter = ("enabled", "missed", "from_settings")
    search_fields = ("name", "callable_path")
    readonly_fields = ("from_settings", "next_tick_at", "next_job", "last_tick_at",
                       "last_job", "version")

    @admin.display(description=_("when"))
    def rule(self, obj: Schedule) -> str:
        return obj.cron or "every %s s" % obj.interval_seconds

    @admin.display(description=_("next tick's job"))
    def next_job(self, obj: Schedule) -> Any:
        return _job_link(obj.next_job_id)

    @admin.display(description=_("last tick's job"))
    def last_job(self, obj: Schedule) -> Any:
        return _job_link(obj.last_job_id)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None and obj.from_settings:  # defined in settings: only ``enabled``
            return (*DEFINITION, *self.readonly_fields)
        return self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
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

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        periodic.cancel_pending(obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in queryset:
            periodic.cancel_pending(obj)
        super().delete_queryset(request, queryset)
