"""Admin actions on periodic schedules: run now, enable, disable. Each needs Django's
``change_schedule`` permission, works for schedules from ``DELAYQ["SCHEDULES"]`` too
(``enabled`` is theirs to set), reports per outcome ("2 disabled, 1 already disabled")
and writes one ``LogEntry`` (CHANGE) per schedule it changed (``ModelAdmin.log_change``).

*Run now* schedules one job now with the schedule's callable, arguments, queue,
priority and ``atomic``, beside its ticks (the next tick stays due when it was);
*enable* and *disable* go through ``periodic.replace``, as a save of the form does:
disabling cancels the materialised next tick's job, enabling materialises the next
tick."""

from __future__ import annotations

import logging

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from redis.exceptions import RedisError

from django_delayq.admin.action_log import Tally
from django_delayq.admin.display import job_link
from django_delayq.core import api, periodic
from django_delayq.core.options import JobSpec
from django_delayq.exceptions import DelayQError
from django_delayq.models import Schedule

logger = logging.getLogger(__name__)


def _set_enabled(modeladmin: admin.ModelAdmin[Schedule], request: HttpRequest,
                 queryset: QuerySet[Schedule], enabled: bool) -> None:
    done = gettext_lazy("enabled") if enabled else gettext_lazy("disabled")
    already = gettext_lazy("already enabled") if enabled else gettext_lazy("already disabled")
    raced = gettext_lazy("changed meanwhile (reload and try again)")
    tally = Tally()
    for s in queryset:
        if s.enabled == enabled:
            tally.add(already)
            continue
        try:
            bumped = periodic.replace(s, {"enabled": enabled})
        except (DelayQError, RedisError) as exc:  # saved; the keeper pass catches up
            logger.warning("schedule %s: %s", s.name, exc)
            tally.fail(s.name, exc)
            continue
        tally.add(done if bumped else raced)
        if bumped:
            modeladmin.log_change(request, s, _("Enabled.") if enabled else _("Disabled."))
    tally.report(modeladmin, request, done, already)


@admin.action(description=gettext_lazy("Enable selected schedules"), permissions=["change"])
def enable_schedules(modeladmin: admin.ModelAdmin[Schedule], request: HttpRequest,
                     queryset: QuerySet[Schedule]) -> None:
    _set_enabled(modeladmin, request, queryset, True)


@admin.action(description=gettext_lazy("Disable selected schedules"), permissions=["change"])
def disable_schedules(modeladmin: admin.ModelAdmin[Schedule], request: HttpRequest,
                      queryset: QuerySet[Schedule]) -> None:
    _set_enabled(modeladmin, request, queryset, False)


def run_once(s: Schedule) -> str:
    """One job of ``s`` due now (not a tick: its key is none); returns its id."""
    spec = JobSpec(args=list(s.args or []), kwargs=dict(s.kwargs or {}),
                   priority=s.priority, group=s.group or None,
                   atomic=True if s.atomic else None)  # as its ticks (core/periodic.py)
    return api.schedule_spec(s.callable_path, spec, queue=s.queue or None).id


@admin.action(description=gettext_lazy("Run selected schedules now (one job each)"),
              permissions=["change"])
def run_schedules_now(modeladmin: admin.ModelAdmin[Schedule], request: HttpRequest,
                      queryset: QuerySet[Schedule]) -> None:
    started = gettext_lazy("scheduled to run now")
    tally = Tally()
    created: list[tuple[str, str]] = []
    for s in queryset:
        try:
            job_id = run_once(s)
        except (DelayQError, RedisError) as exc:
            logger.warning("schedule %s: run now failed: %s", s.name, exc)
            tally.fail(s.name, exc)
            continue
        tally.add(started)
        created.append((s.name, job_id))
        modeladmin.log_change(request, s, _("Run now as job %s.") % job_id)
    tally.report(modeladmin, request, started)
    if created:
        site = modeladmin.admin_site.name
        links = format_html_join(", ", "{}: {}", (
            (name, job_link(job_id, site=site)) for name, job_id in created[:10]))
        modeladmin.message_user(request, format_html("{} {}", _("New jobs:"), links),
                                messages.INFO)


SCHEDULE_ACTIONS = [run_schedules_now, enable_schedules, disable_schedules]
