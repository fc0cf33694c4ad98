"""The admin of audit rows: a read-only list and detail page, with permission-gated
actions (cancel, run now, reschedule, requeue) that call ``django_delayq.core.api``.

Rows are never added, changed or deleted through forms: the row is the job's durable
record. Each action needs its custom permission (``django_delayq.cancel_job``,
``run_job_now``, ``reschedule_job``, ``requeue_job``); without any of them the list has
no actions at all.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _

from django_delayq.admin import reports
from django_delayq.admin.actions import ACTIONS
from django_delayq.models import Job, JobAttempt, JobStatus

STATUS_COLOURS = {
    JobStatus.SCHEDULED: "#417690",
    JobStatus.RUNNING: "#b8860b",
    JobStatus.RETRYING: "#d2691e",
    JobStatus.SUCCEEDED: "#2e7d32",
    JobStatus.DEAD: "#ba2121",
    JobStatus.CANCELLED: "#666",
}


def _error_line(error_type: str, message: str) -> str:
    """``error_type`` in code type beside its message, both escaped ("" without either)."""
    if not error_type:
        return message
    return format_html("<code>{}</code> {}", error_type, message)


def _pre(value: Any) -> str:
    if value in (None, "", [], {}):
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False,
                                                           sort_keys=True)
    return format_html('<pre class="delayq-pre">{}</pre>', text)


class JobAttemptInline(admin.TabularInline):
    """Attempt history: one row per failed or lost delivery, read-only."""

    model = JobAttempt
    extra = 0
    can_delete = False
    show_change_link = False
    ordering = ("number",)
    fields = ("number", "outcome", "started_at", "finished_at", "worker_id", "error_detail")
    readonly_fields = fields
    verbose_name_plural = _("attempt history")

    @admin.display(description=_("error"))
    def error_detail(self, obj: JobAttempt) -> str:
        head = _error_line(obj.error_type, obj.error)
        if not obj.traceback:
            return head or "-"
        return format_html('<details><summary>{}</summary><pre class="delayq-pre">{}</pre>'
                           "</details>", head or _("traceback"), obj.traceback)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("django_delayq.view_job")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "callable_path", "queue", "status_badge", "run_at", "attempts_display",
                    "created_at", "finished_at")
    list_filter = ("status", "queue", "callable_path")
    search_fields = ("=id", "callable_path", "=key")
    search_help_text = _("An exact job id or idempotency key, or part of a dotted path.")
    date_hierarchy = "created_at"
    list_per_page = 50
    show_full_result_count = False  # no COUNT(*) of a huge table on every page
    ordering = ("-created_at",)
    actions = ACTIONS
    inlines = [JobAttemptInline]
    fieldsets = (
        (None, {"fields": ("id", "callable_path", "queue", "status_badge", "key",
                           "cancel_requested")}),
        (_("Arguments"), {"fields": ("args_display", "kwargs_display")}),
        (_("Timing"), {"fields": ("created_at", "run_at", "started_at", "finished_at",
                                  "updated_at", "lateness")}),
        (_("Attempts"), {"fields": ("attempts_display", "backoff_display", "worker_id")}),
        (_("Outcome"), {"fields": ("result_display", "last_error_display",
                                   "traceback_display")}),
    )
    readonly_fields = ("id", "callable_path", "queue", "status_badge", "key", "cancel_requested",
                       "args_display", "kwargs_display", "created_at", "run_at", "started_at",
                       "finished_at", "updated_at", "lateness", "attempts_display",
                       "backoff_display", "worker_id", "result_display", "last_error_display",
                       "traceback_display")

    class Media:
        css = {"all": ("django_delayq/admin.css",)}

    # -- display -------------------------------------------------------------------

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, obj: Job) -> str:
        colour = STATUS_COLOURS.get(JobStatus(obj.status), "#666")
        label = obj.get_status_display()
        if obj.cancel_requested and obj.status == JobStatus.RUNNING:
            label = "%s (%s)" % (label, _("cancel requested"))
        return format_html('<span class="delayq-status" style="color:{}">{}</span>',
                           colour, label)

    @admin.display(description=_("attempts"), ordering="attempts")
    def attempts_display(self, obj: Job) -> str:
        return "%d / %d" % (obj.attempts, obj.max_attempts)

    @admin.display(description=_("args"))
    def args_display(self, obj: Job) -> str:
        return _pre(obj.args)

    @admin.display(description=_("kwargs"))
    def kwargs_display(self, obj: Job) -> str:
        return _pre(obj.kwargs)

    @admin.display(description=_("backoff"))
    def backoff_display(self, obj: Job) -> str:
        return _pre(obj.backoff) if obj.backoff is not None else str(_("default policy"))

    @admin.display(description=_("result"))
    def result_display(self, obj: Job) -> str:
        return _pre(obj.result)

    @admin.display(description=_("last error"))
    def last_error_display(self, obj: Job) -> str:
        return _error_line(obj.error_type, obj.last_error) or "-"

    @admin.display(description=_("traceback of the last error"))
    def traceback_display(self, obj: Job) -> str:
        return _pre(obj.traceback)

    @admin.display(description=_("lateness"))
    def lateness(self, obj: Job) -> str:
        ms = obj.lateness_ms()
        return "-" if ms is None else "%.1f ms" % ms

    # -- read-only -----------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # -- action permissions (checked by @admin.action(permissions=[...])) ------------

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_delayq.cancel_job")

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_delayq.run_job_now")

    def has_reschedule_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_delayq.reschedule_job")

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_delayq.requeue_job")

    # -- counts per status in the changelist header ----------------------------------

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra_context = {**(extra_context or {}), "delayq_status_counts":
                         self.status_counts(request),
                         "delayq_report_url": self.report_link(request)}
        return super().changelist_view(request, extra_context=extra_context)

    # -- the Spark report (django_delayq.admin.reports) ---------------------------------

    def get_urls(self) -> list[URLPattern]:
        return [*reports.report_urls(self, self.admin_site.admin_view), *super().get_urls()]

    def report_link(self, request: HttpRequest) -> str | None:
        """The report page's URL for users who may see it, when REPORT_DIR is set."""
        if not request.user.has_perm(reports.PERMISSION) or reports.report_root() is None:
            return None
        return reverse("admin:django_delayq_job_report", current_app=self.admin_site.name)

    #: Counts stop here ("10000+"): each is one index range scan of at most this many
    #: rows, so the page stays fast with hundreds of millions of finished jobs.
    status_count_cap = 10_000

    def status_counts(self, request: HttpRequest) -> list[dict[str, Any]]:
        """One entry per status (zeros included) over every row, linking to its filter."""
        cap = self.status_count_cap
        active = request.GET.get("status__exact")
        out = []
        for value, label in JobStatus.choices:
            n = Job.objects.filter(status=value).order_by()[:cap + 1].count()
            out.append({"value": value, "label": label, "count": min(n, cap), "more": n > cap,
                        "colour": STATUS_COLOURS[JobStatus(value)], "active": value == active,
                        "query": "?" + urlencode({"status__exact": value})})
        return out
