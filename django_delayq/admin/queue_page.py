"""The queues page of the admin: per queue the counts in Redis (due now, scheduled, in
flight, dead), next due time, paused state and limit, the callable limits, and buttons to
pause, resume and purge a queue, or one group of it (docs/groups.md), and the paused
groups.

Seeing the page needs ``django_delayq.view_job``; pausing and resuming need
``pause_queue``, purging ``purge_queue`` (a confirmation box must be ticked: purging
cancels every job waiting in the queue). Actions are POST (CSRF-checked by the admin),
call the core API (``core.queue_controls.control``: ``pause_queue``, ``resume_queue``,
``purge_queue``) and are written to the admin's log. The same buttons with a group
given act on that group of the queue (``pause_group``, ``resume_group``,
``purge_group``), behind the same permissions. A group's limits (docs/groups.md,
"Limits") are set or lifted with ``set_group_limit`` and ``clear_group_limit`` (the
``change_grouplimit`` permission), written to the log too; the page lists each queue's
group defaults and overrides.
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.text import capfirst
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from redis.exceptions import RedisError

from django_delayq.admin import display
from django_delayq.admin.action_log import log_change
from django_delayq.core.conf import Settings, get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.queue_controls import control
from django_delayq.core.queues import known_queues
from django_delayq.engine.logtext import shown
from django_delayq.exceptions import DelayQError
from django_delayq.observe import redis_state
from django_delayq.observe.redis_state import callable_limits, group_limit_text, queue_group_limits

logger = logging.getLogger(__name__)

VIEW = "django_delayq.view_job"
PAUSE = "django_delayq.pause_queue"
PURGE = "django_delayq.purge_queue"
LIMIT = "django_delayq.change_grouplimit"
OPERATIONS = {"pause": PAUSE, "resume": PAUSE, "purge": PURGE, "limit": LIMIT,
              "unlimit": LIMIT}


@permission_required(VIEW, raise_exception=True)
def queues_page(request: HttpRequest, admin: ModelAdmin[Any]) -> HttpResponse:
    if request.method == "POST":
        queue, op = request.POST.get("queue", ""), request.POST.get("op", "")
        if op not in OPERATIONS or not request.user.has_perm(OPERATIONS[op]):
            raise PermissionDenied
        admin.message_user(request, *_act(request, op, queue))
        return HttpResponseRedirect(request.path)
    settings, engine = get_settings(), get_engine()
    context: dict[str, Any] = {
        "can_pause": request.user.has_perm(PAUSE), "can_purge": request.user.has_perm(PURGE),
        "can_limit": request.user.has_perm(LIMIT), "group_limits": _group_limits(settings),
        "dashboard_url": display.job_url(admin.admin_site.name, "dashboard")}
    try:
        context["queues"] = redis_state.queues(engine, known_queues(settings))
        context["holding"] = redis_state.held(context["queues"], redis_state.workers(engine))
        context["callable_limits"] = callable_limits(engine, settings)
        context["paused_groups"] = [(q.queue, ", ".join(groups)) for q in context["queues"]
                                    if (groups := engine.paused_groups(q.queue))]
    except RedisError as exc:
        logger.warning("queues page: Redis unavailable: %s", shown(exc))
        context["redis_error"] = str(exc)
    return display.render(request, admin, "queues", _("Queues"), **context)


def _act(request: HttpRequest, op: str, queue: str) -> tuple[str, int]:
    """Perform ``op`` on ``queue``, or on the group the form names: the message for the
    operator and its level. A change is written to the admin's log."""
    if queue not in known_queues():
        return _("Unknown queue %r.") % queue, messages.ERROR
    group = request.POST.get("group")  # sent by the group forms only, blank or not
    if op == "purge" and request.POST.get("confirm") != "yes":
        if group:
            return _("Tick the box to confirm purging group %(group)r of %(queue)s.") % {
                "group": group, "queue": queue}, messages.WARNING
        return _("Tick the box to confirm purging %s.") % queue, messages.WARNING
    try:  # a group as typed (it may hold spaces); a blank one is refused
        text, changed = _perform(op, queue, group, request.POST)
    except (DelayQError, RedisError) as exc:
        logger.warning("queue %s: %s failed: %s", shown(queue), shown(op), shown(exc))
        return _("%(op)s %(queue)s failed: %(error)s") % {
            "op": op, "queue": queue, "error": exc}, messages.ERROR
    if changed:
        log_change(request, "queue %s" % queue, text)
    return text, messages.SUCCESS if changed else messages.INFO


TOGGLES = {  # op: the message if it changed something, if not
    "pause": (gettext_lazy("Paused %s."), gettext_lazy("%s was already paused.")),
    "resume": (gettext_lazy("Resumed %s."), gettext_lazy("%s was not paused.")),
    "unlimit": (gettext_lazy("%s back to the queue's group limits."),
                gettext_lazy("%s had no limits of its own.")),
}


def _perform(op: str, queue: str, group: str | None, form: Any) -> tuple[str, bool]:
    """Perform ``op`` on ``queue``, or on its ``group``; the message for the operator and
    whether anything changed (``InvalidJob`` names a bad group id or limit)."""
    raw = form.get("concurrency", "").strip()  # sent by the limit form
    # a text that is no integer goes to the API, refused naming it; isdigit() lets "²" through
    concurrency: Any = int(raw) if raw.isdecimal() else raw or None
    done = control(op, queue, group, concurrency=concurrency,
                   rate_limit=form.get("rate_limit", "").strip() or None)
    what = _("queue %s") % queue if group is None else _(
        "group %(group)s of queue %(queue)s") % {"group": group, "queue": queue}
    if op in TOGGLES:
        if_changed, if_not = TOGGLES[op]
        return capfirst((if_changed if done.changed else if_not) % what), done.changed
    if done.limits is not None:
        return _("Limited %(what)s: %(limits)s.") % {"what": what, "limits": group_limit_text(
            done.limits.concurrency, done.limits.rate_limit, _("default"))}, done.changed
    if group is None:
        return _("Purged %(what)s: %(count)d waiting jobs cancelled; %(ticks)d schedule "
                 "ticks kept.") % {"what": what, "count": done.removed,
                                   "ticks": done.ticks_kept}, done.changed
    return _("Purged %(what)s: %(count)d waiting jobs cancelled.") % {
        "what": what, "count": done.removed}, done.changed


def _group_limits(settings: Settings) -> list[tuple[str, str, str]]:
    """(queue, its groups' defaults, its overrides) of the queues that have either."""
    return [(queue, defaults or group_limit_text(None, None), ", ".join(
        "%s: %s" % (o.group, group_limit_text(o.concurrency, o.rate_limit)) for o in own))
        for queue, (defaults, own) in queue_group_limits(settings, known_queues(settings)).items()]
