"""The admin's own log: every action an operator takes (cancel, run now, reschedule,
requeue on jobs; pause, resume, purge on queues) writes a ``LogEntry`` (CHANGE) saying
what changed, so "who paused payments at 03:12?" has an answer in the admin's history."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest

from django_delayq.models import Job

REPR_CHARS = 200  # LogEntry.object_repr is a CharField(200)


def log_job(request: HttpRequest, job_id: str, callable_path: str, message: str) -> None:
    """One CHANGE entry on the job ``job_id`` (its history page lists it)."""
    _log(request, job_id, "%s %s" % (callable_path, job_id), message)


def log_queue(request: HttpRequest, queue: str, message: str) -> None:
    """One CHANGE entry on no job in particular: ``queue <name>`` with ``message``."""
    _log(request, None, "queue %s" % queue, message)


def _log(request: HttpRequest, object_id: str | None, text: str, message: str) -> None:
    LogEntry.objects.create(
        user_id=cast(Any, request.user.pk), content_type=ContentType.objects.get_for_model(Job),
        object_id=object_id, object_repr=text[:REPR_CHARS], action_flag=CHANGE,
        change_message=message)
