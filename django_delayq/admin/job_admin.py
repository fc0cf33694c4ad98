"""The admin of audit rows: a read-only list and detail page, with permission-gated
actions (cancel, run now, reschedule, requeue) that call ``django_delayq.core.api``.

Its URLs also serve the queues page (``queues``), the live dashboard (``dashboard``) and
the Spark report (``reports``).

Rows are never added, changed or deleted through forms: the row is the job's durable
record. Each action needs its custom permission (``django_delayq.cancel_job``,
``run_job_now``, ``reschedule_job``, ``requeue_job``); without any of them the list has
no actions at all.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, Q, Window
from django.db.models.functions import Lag
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from django_delayq.admin import actions, dashboard, display, queue_page, reports, workflow_graph
from django_delayq.admin.actions import ACTIONS
from django_delayq.admin.display import column, error_line, pre
from django_delayq.admin.paging import CappedChangeList, CappedPaginator, PastLastPage
from django_delayq.core import progress, stored
from django_delayq.models import LIVE_STATUSES, Job, JobAttempt, JobStatus

if TYPE_CHECKING:  # generic for the type checker only: Django's classes take no [...]
    from django_stubs_ext import StrOrPromise

    _InlineBase = admin.TabularInline[JobAttempt, Job]
    _JobAdminBase = admin.ModelAdmin[Job]
else:
    _InlineBase = admin.TabularInline
    _JobAdminBase = admin.ModelAdmin


def _at_seconds(field: str, label: StrOrPromise) -> Callable[[Any, Any], str]:
    """A display method showing the datetime ``field`` to the second, sortable by it."""
    return column(label, lambda obj: display.seconds(getattr(obj, field)), field)


def _stored(field: str, label: StrOrPromise) -> Callable[[Any, Any], str]:
    """A display method showing the stored JSON ``field`` in a ``<pre>`` (``display.pre``)."""
    return column(label, lambda obj: pre(stored.value(obj, field)))


def _on_site(render: Callable[[Job, str], str], label: StrOrPromise) -> Callable[[Any, Any], str]:
    """A display method showing ``render(job, admin site name)`` (links to other jobs)."""
    return admin.display(description=label)(lambda self, obj: render(obj, self.admin_site.name))


def _may(codename: str) -> Callable[[Any, HttpRequest], bool]:
    """An action's permission check (``@admin.action(permissions=[...])``)."""
    return lambda self, request: request.user.has_perm("django_delayq." + codename)


def _never(self: object, request: HttpRequest, obj: object = None) -> bool:
    return False


class ReadOnly:
    """Rows are never added, changed or deleted through the admin."""

    has_add_permission = has_change_permission = has_delete_permission = _never


class JobAttemptInline(ReadOnly, _InlineBase):
    """Attempt history: one row per failed or lost delivery, read-only."""

    model = JobAttempt
    ordering = ("pk",)  # recording order: a requeue under the same id restarts the numbers
    fields = ("number", "requeue_mark", "outcome", "started", "finished", "worker_id",
              "error_detail")
    readonly_fields = fields
    verbose_name_plural = _("attempt history")
    started = _at_seconds("started_at", _("started at"))
    finished = _at_seconds("finished_at", _("finished at"))

    def get_queryset(self, request: HttpRequest) -> Any:
        """Each attempt with the number of the one recorded before it (``previous``)."""
        previous = Window(Lag("number"), partition_by=F("job_id"), order_by=F("pk").asc())
        return super().get_queryset(request).annotate(previous=previous)

    @admin.display(description=_("requeue"))
    def requeue_mark(self, obj: JobAttempt) -> str:
        """"requeued before this attempt" on the first attempt after a requeue: a requeue
        under the same id starts the count over, so the number does not go up."""
        previous = getattr(obj, "previous", None)
        if previous is None or obj.number > previous:
            return ""
        return format_html('<span class="delayq-requeue-mark">{}</span>',
                           _("requeued before this attempt"))

    @admin.display(description=_("error"))
    def error_detail(self, obj: JobAttempt) -> str:
        head = error_line(obj.error_type, obj.error)
        if not obj.traceback:
            return head or "-"
        return format_html("<details><summary>{}</summary>{}</details>",
                           head or _("traceback"), display.traceback_html(obj.traceback))

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return request.user.has_perm("django_delayq.view_job")


class GroupFilter(admin.SimpleListFilter):
    """The jobs of one group (docs/groups.md): the 20 groups with the most live jobs as
    links (one GROUP BY over the rows that have a group: a partial index), any group by
    ``?group=<id>`` in the address."""

    title = _("group")
    parameter_name = "group"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        top = (Job.objects.filter(status__in=LIVE_STATUSES).exclude(group="")
               .values("group").annotate(n=Count("pk")).order_by("-n", "group")[:20])
        found = [(row["group"], row["group"]) for row in top]
        value = self.value()
        if value is not None and (value, value) not in found:  # any group by ?group=<id>:
            found.append((value, value))  # listed, else Django would not apply the filter
        return found

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.value()
        return queryset if value is None else queryset.filter(group=value)


@admin.register(Job)
class JobAdmin(ReadOnly, _JobAdminBase):
    # One line per job, within 1400 px beside the filters: what triage needs; each cell is
    # cut with an ellipsis (admin.css), its whole text in its title and on the job's page.
    list_display = ("status_badge", "job_column", "queue", "due_column", "lateness_column",
                    "attempts_display", "last_error_short")
    list_display_links = ("job_column",)
    list_filter = ("status", "queue", GroupFilter, "callable_path",
                   ("run_at", admin.DateFieldListFilter),
                   ("finished_at", admin.DateFieldListFilter))
    search_fields = ("=id", "callable_path", "=key", "last_error", "error_type", "args",
                     "kwargs")
    search_help_text = _("An exact job id or idempotency key, or part of a dotted path, of "
                         "the last error (its text or exception class) or of the arguments "
                         "(as JSON text).")
    # No date_hierarchy: its links read every row's creation date (SELECT DISTINCT over
    # the table); the due and finish date filters above and the newest-first order stand
    # in. The paginator counts at most CappedPaginator.cap rows (a note says when there are
    # more), and show_full_result_count = False drops Django's second count, of the table.
    list_per_page = 50
    paginator = CappedPaginator
    show_full_result_count = False
    ordering = ("-created_at",)
    actions = ACTIONS
    inlines = [JobAttemptInline]
    fieldsets = (
        (None, {"fields": ("id", "callable_path", "queue", "status_badge", "key",
                           "cancel_requested", "priority", "group", "progress_display")}),
        (_("Arguments"), {"fields": ("args_display", "kwargs_display")}),
        (_("Timing"), {"fields": ("created_at_s", "scheduled_for_s", "run_at_s", "started_at_s",
                                  "finished_at_s", "updated_at_s", "expires_at_s",
                                  "lateness")}),
        (_("Attempts"), {"fields": ("attempts_display", "time_limit", "retry_on_display",
                                    "backoff_display", "worker_id")}),
        (_("Outcome"), {"fields": ("result_display", "last_error_display",
                                   "traceback_display")}),
        (_("Requeue lineage"), {"fields": ("requeued_from_display", "requeued_as_display")}),
        (_("Workflow"), {"fields": ("parents_left_display", "parents_display", "children_display",
                                    "workflow_graph_display")}),
    )
    readonly_fields = tuple(
        f for _name, opts in fieldsets for f in opts["fields"])  # type: ignore[misc]

    run_at_s = _at_seconds("run_at", _("due at"))
    created_at_s = _at_seconds("created_at", _("created at"))
    finished_at_s = _at_seconds("finished_at", _("finished at"))
    started_at_s = _at_seconds("started_at", _("started at"))
    updated_at_s = _at_seconds("updated_at", _("updated at"))
    scheduled_for_s = _at_seconds("scheduled_for", _("first due at"))
    expires_at_s = _at_seconds("expires_at", _("expires at"))
    args_display = _stored("args", _("args"))
    kwargs_display = _stored("kwargs", _("kwargs"))
    result_display = _stored("result", _("result"))
    progress_display = _stored("progress", _("progress"))
    requeued_from_display = _on_site(workflow_graph.requeued_from, _("requeued from"))
    requeued_as_display = _on_site(workflow_graph.requeued_as, _("requeued as"))
    parents_display = _on_site(workflow_graph.parents, _("waits for"))
    children_display = _on_site(workflow_graph.children, _("waited for by"))
    workflow_graph_display = _on_site(workflow_graph.render, _("graph"))
    due_column = column(_("due at"), lambda job: display.short_seconds(job.run_at), "run_at")
    time_limit = column(_("time limit"), lambda job: "-" if job.timeout is None
                        else "%g s" % job.timeout, "timeout")
    lateness_column = column(_("lateness"), lambda job: display.duration(job.lateness_ms()))
    last_error_short = column(_("last error"),
                              lambda job: display.short_error(job.error_type, job.last_error))
    attempts_display = column(_("attempts"), lambda job: "%d / %d" % (
        job.attempts, job.max_attempts), "attempts")
    last_error_display = column(_("last error"),
                                lambda job: error_line(job.error_type, job.last_error) or "-")
    traceback_display = column(_("traceback of the last error"),
                               lambda job: display.traceback_html(job.traceback))

    class Media:
        css = {"all": ("django_delayq/admin.css",)}

    # -- display -------------------------------------------------------------------

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, obj: Job) -> str:
        """The status, and a running job's progress in one escaped line after it."""
        label = obj.get_status_display()
        if obj.cancel_requested and obj.status == JobStatus.RUNNING:
            label = "%s (%s)" % (label, _("cancel requested"))
        shown = display.status_badge(obj.status, label)
        value = stored.value(obj, "progress")
        if value is None:
            return shown
        if isinstance(value, stored.Raw):
            value = value.text
        return format_html('{} <span class="delayq-progress" title="{}">{}</span>', shown,
                           progress.compact(value, 300), progress.compact(value))

    @admin.display(description=_("job"), ordering="callable_path")
    def job_column(self, obj: Job) -> str:
        """The callable's name, then its module (the link to the job's page); the id and
        the whole dotted path in the title."""
        module, _dot, name = obj.callable_path.rpartition(".")
        return format_html('<span title="{} {}">{} <span class="delayq-module">{}</span>'
                           "</span>", obj.pk, obj.callable_path, name, module)

    retry_on_display = column(_("retry on"), lambda job: pre(v) if (
        v := stored.value(job, "retry_on")) else str(_("any exception")))
    # how many parents (after=) have not finished; the job reaches Redis at 0
    parents_left_display = column(_("parents left"), lambda job: "%d (%s)" % (
        job.parents_left, _("it is sent to Redis when all have finished"))
        if job.parents_left else "0")
    backoff_display = column(_("backoff"), lambda job: pre(v) if (
        v := stored.value(job, "backoff")) is not None else str(_("default policy")))
    lateness = column(_("lateness"), lambda job: "-" if (ms := job.lateness_ms()) is None
                      else "%.1f ms" % ms)

    def get_queryset(self, request: HttpRequest) -> Any:
        """The rows with their JSON columns read as text and parsed by the display
        methods (``core.stored``): a row holding JSON too deeply nested to load still
        shows, on the list and on its page."""
        return stored.with_text(super().get_queryset(request))

    def get_search_results(self, request: HttpRequest, queryset: Any,
                           search_term: str) -> tuple[Any, bool]:
        """Django's search (each word a term, quotes grouping words), and a search the
        words would split (a space, a quote: ``two words``, ``say "hi"``) also finds the
        job whose id or idempotency key is the whole text."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        if search_term.split() != [search_term] or '"' in search_term or "'" in search_term:
            whole = {search_term, search_term.strip()}
            found = found | queryset.filter(Q(key__in=whole) | Q(pk__in=whole))
        return found, duplicates

    # -- action permissions (checked by @admin.action(permissions=[...])) ------------

    has_cancel_permission = _may("cancel_job")
    has_run_now_permission = _may("run_job_now")
    has_reschedule_permission = _may("reschedule_job")
    has_requeue_permission = _may("requeue_job")

    # -- counts per status in the changelist header ----------------------------------

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra_context = {**(extra_context or {}), "delayq_status_counts": self.status_counts(),
                         "delayq_report_url": self.report_link(request),
                         "delayq_queues_url": display.job_url(self.admin_site.name, "queues"),
                         "delayq_dashboard_url": display.job_url(self.admin_site.name,
                                                                 "dashboard")}
        try:
            return super().changelist_view(request, extra_context=extra_context)
        except PastLastPage as past:  # the last page, with the same filters and search
            return HttpResponseRedirect(request.path + past.url)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return CappedChangeList

    # -- the Spark report (django_delayq.admin.reports) ---------------------------------

    def get_urls(self) -> list[URLPattern]:
        """The pages of ``reports``, ``queue_page``, ``dashboard`` and ``act`` (behind
        ``admin_site.admin_view``: staff login), before Django's own ``<id>/...`` ones."""
        def own(route: str, name: str, view: Callable[..., Any]) -> URLPattern:
            return path(route, self.admin_site.admin_view(view), name="django_delayq_job_" + name)

        return [own("report/", "report", partial(reports.report_page, admin=self)),
                own("report/<path:subpath>", "report_file", reports.report_file),
                own("queues/", "queues", partial(queue_page.queues_page, admin=self)),
                own("dashboard/", "dashboard", partial(dashboard.dashboard_page, admin=self)),
                own("dashboard/data/", "dashboard_data", dashboard.dashboard_data),
                own("<path:object_id>/act/", "act", partial(act, admin=self)),
                *super().get_urls()]

    def render_change_form(self, request: HttpRequest, context: dict[str, Any], add: bool = False,
                           change: bool = False, form_url: str = "", obj: Job | None = None
                           ) -> HttpResponse:
        """The job's page, with buttons for the actions this user may take on it."""
        if obj is not None:
            context.update(page_context(self, request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def report_link(self, request: HttpRequest) -> str | None:
        """The report page's URL for users who may see it, when REPORT_DIR is set."""
        if not request.user.has_perm(reports.PERMISSION) or reports.report_root() is None:
            return None
        return display.job_url(self.admin_site.name, "report")

    #: Counts stop here ("10000+"): each is one index range scan of at most this many
    #: rows, so the page stays fast with hundreds of millions of finished jobs.
    status_count_cap = 10_000

    def status_counts(self) -> list[dict[str, Any]]:
        """One entry per status (zeros included) over every row; the template links each
        to its filter (``?status__exact=``)."""
        cap = self.status_count_cap
        counts = ((value, label, Job.objects.filter(status=value).order_by()[:cap + 1].count())
                  for value, label in JobStatus.choices)
        return [{"value": value, "label": label, "count": min(n, cap), "more": n > cap,
                 "colour": display.STATUS_COLOURS.get(JobStatus(value), "#888")}
                for value, label, n in counts]


# -- the job's page: buttons for the actions of the list --------------------------------
#
# Buttons on a job's page for the actions of the list: cancel, run now, reschedule,
# requeue. Each button is a POST form (CSRF-checked by the admin) to ``<id>/act/``, shown
# only to users with the action's permission and only where the job's status allows it;
# the view checks the permissions again (the view permission too, as Django does for the
# list's actions) and performs the list's own action on that one job
# (``actions``: the same API call, the same outcome message, the same ``LogEntry``).
#
# Cancelling destroys (the job will never run): its button leads to a confirmation page,
# and the job is cancelled only by the POST of that page (``confirm=yes``). Rescheduling
# takes a delay or a date and time in a small form on the page.

WAITING = (JobStatus.SCHEDULED, JobStatus.RETRYING)
UNFINISHED = (JobStatus.WAITING, JobStatus.SCHEDULED, JobStatus.RETRYING, JobStatus.RUNNING)
FINISHED = (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.EXPIRED)


class Button(NamedTuple):
    label: Any
    statuses: tuple[str, ...]  # where it is shown
    action: Callable[..., Any]  # the list's action, performed on this job alone


#: Each button by its op, which is also its action's permission (``has_<op>_permission``),
#: in the page's order; "cancel" destroys: marked on the page, confirmed before it acts.
BUTTONS = {"run_now": Button(_("Run now"), WAITING, actions.run_jobs_now),
           "reschedule": Button(_("Reschedule"), WAITING, actions.reschedule_jobs),
           "requeue": Button(_("Requeue"), FINISHED, actions.requeue_jobs),
           "cancel": Button(_("Cancel job…"), UNFINISHED, actions.cancel_jobs)}


def _allowed(admin: JobAdmin, request: HttpRequest, op: str) -> bool:
    """As Django gates the list's actions: the view permission and the action's own."""
    return admin.has_view_or_change_permission(request) and bool(
        getattr(admin, "has_%s_permission" % op)(request))


def page_context(admin: JobAdmin, request: HttpRequest, job: Job) -> dict[str, Any]:
    """What the job's page shows above its fields: the buttons this user may press for
    this job, the URL they post to, and the reschedule form when it is one of them."""
    shown = [{"op": op, "label": b.label} for op, b in BUTTONS.items()
             if job.status in b.statuses and _allowed(admin, request, op)]
    return {"delayq_buttons": shown,
            "delayq_act_url": display.job_url(admin.admin_site.name, "act", job.pk),
            "delayq_reschedule_form": actions.RescheduleForm()
            if any(b["op"] == "reschedule" for b in shown) else None}


def act(request: HttpRequest, admin: JobAdmin, object_id: str) -> HttpResponse:
    """Refused (403) before the row is read unless the user may view jobs and take the
    action: the same answer whether the id exists or not."""
    op = request.POST.get("op", "")
    if request.method != "POST" or op not in BUTTONS or not _allowed(admin, request, op):
        raise PermissionDenied
    job = get_object_or_404(Job, pk=unquote(object_id))
    page = display.job_url(admin.admin_site.name, "change", job.pk)
    if op == "cancel" and request.POST.get("confirm") != "yes":
        return display.render(request, admin, "confirm_cancel", _("Cancel job %s?") % job.pk,
                            job=job, act_url=request.path, page_url=page)
    jobs = Job.objects.filter(pk=job.pk)
    if op != "reschedule":
        BUTTONS[op].action(admin, request, jobs)
    elif (form := actions.RescheduleForm(request.POST)).is_valid():
        actions.reschedule(admin, request, jobs, form)
    else:
        errors = "; ".join(str(e) for errs in form.errors.values() for e in errs)
        admin.message_user(request, _("Not rescheduled: %s") % errors, messages.ERROR)
    return HttpResponseRedirect(page)
