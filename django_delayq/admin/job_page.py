"""Buttons on a job's page for the actions of the list: cancel, run now, reschedule,
requeue. Each button is a POST form (CSRF-checked by the admin) to ``<id>/act/``, shown
only to users with the action's permission and only where the job's status allows it;
the view checks the permission again and performs the list's own action on that one job
(``actions``: the same API call, the same outcome message, the same ``LogEntry``).

Cancelling destroys (the job will never run): its button leads to a confirmation page,
and the job is cancelled only by the POST of that page (``confirm=yes``). Rescheduling
takes a delay or a date and time in a small form on the page."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_delayq.admin import actions, pages
from django_delayq.admin.forms import RescheduleForm
from django_delayq.models import Job, JobStatus

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

WAITING = (JobStatus.SCHEDULED, JobStatus.RETRYING)
UNFINISHED = (JobStatus.WAITING, JobStatus.SCHEDULED, JobStatus.RETRYING, JobStatus.RUNNING)
FINISHED = (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.EXPIRED)


@dataclass(frozen=True, slots=True, kw_only=True)
class Button:
    op: str  # also the action's permission: JobAdmin.has_<op>_permission
    label: Any
    statuses: tuple[str, ...]  # where it is shown
    action: Callable[..., Any]
    danger: bool = False


BUTTONS = (
    Button(op="run_now", label=gettext_lazy("Run now"), statuses=WAITING,
           action=actions.run_jobs_now),
    Button(op="reschedule", label=gettext_lazy("Reschedule"), statuses=WAITING,
           action=actions.reschedule_jobs),
    Button(op="requeue", label=gettext_lazy("Requeue"), statuses=FINISHED,
           action=actions.requeue_jobs),
    Button(op="cancel", label=gettext_lazy("Cancel job…"), statuses=UNFINISHED,
           action=actions.cancel_jobs, danger=True),
)
BY_OP = {b.op: b for b in BUTTONS}


def _allowed(admin: ModelAdmin[Any], request: HttpRequest, button: Button) -> bool:
    return bool(getattr(admin, "has_%s_permission" % button.op)(request))


def page_context(admin: ModelAdmin[Any], request: HttpRequest, job: Job) -> dict[str, Any]:
    """What the job's page shows above its fields: the buttons this user may press for
    this job, the URL they post to, and the reschedule form when it is one of them."""
    shown = [b for b in BUTTONS if job.status in b.statuses and _allowed(admin, request, b)]
    return {"delayq_buttons": shown,
            "delayq_act_url": reverse("admin:django_delayq_job_act", args=(job.pk,),
                                      current_app=admin.admin_site.name),
            "delayq_reschedule_form": RescheduleForm()
            if any(b.op == "reschedule" for b in shown) else None}


def act(request: HttpRequest, admin: ModelAdmin[Any], object_id: str) -> HttpResponse:
    button = BY_OP.get(request.POST.get("op", ""))
    if request.method != "POST" or button is None or not _allowed(admin, request, button):
        raise PermissionDenied
    job = get_object_or_404(Job, pk=unquote(object_id))
    page = reverse("admin:django_delayq_job_change", args=(job.pk,),
                   current_app=admin.admin_site.name)
    if button.op == "cancel" and request.POST.get("confirm") != "yes":
        return pages.render(request, admin, "confirm_cancel", _("Cancel job %s?") % job.pk,
                            job=job, act_url=request.path, page_url=page)
    jobs = Job.objects.filter(pk=job.pk)
    if button.op != "reschedule":
        button.action(admin, request, jobs)
    elif (form := RescheduleForm(request.POST)).is_valid():
        actions.reschedule(admin, request, jobs, form)
    else:
        errors = "; ".join(str(e) for errs in form.errors.values() for e in errs)
        admin.message_user(request, _("Not rescheduled: %s") % errors, messages.ERROR)
    return HttpResponseRedirect(page)
