"""What an admin action leaves behind: one CHANGE ``LogEntry`` per change, on the job
(its history page lists it) or on a queue (``log_change``), and the message counting its
outcomes, most common first (``Tally``: "3 cancelled, 1 already running"). The job actions
(``actions``), the queues page (``queue_page``) and the schedules' actions (in
``schedule_admin``) share them."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from redis.exceptions import RedisError

from django_delayq.engine.logtext import shown
from django_delayq.exceptions import DelayQError, JobNotFound
from django_delayq.models import Job

logger = logging.getLogger(__name__)

REPR_CHARS = 200  # LogEntry.object_repr is a CharField(200)
ERROR = gettext_lazy("failed")
GONE = gettext_lazy("no longer exist")
T = TypeVar("T")
Done = tuple[object, str | None]  # an outcome's label, and what the log says (if any)


def log_change(request: HttpRequest, text: str, message: str, job_id: str | None = None) -> None:
    """One CHANGE entry saying ``message``: on the job ``job_id`` (its history page lists
    it; ``text`` is "<callable path> <id>"), or on no job in particular (``queue <name>``)."""
    LogEntry.objects.create(
        user_id=cast(Any, request.user.pk), content_type=ContentType.objects.get_for_model(Job),
        object_id=job_id, object_repr=text[:REPR_CHARS], action_flag=CHANGE,
        change_message=message)


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


def each(modeladmin: admin.ModelAdmin[Any], request: HttpRequest, items: Iterable[T],
         kind: str, name: Callable[[T], str], call: Callable[[T], Done],
         log: Callable[[T, str], object], *success: object, tally: Tally | None = None
         ) -> Tally:
    """``call`` each item (a job, a schedule: ``name`` says which); count the label it
    returns in ``tally`` and ``log`` its message; a job gone or an error is counted, not
    raised. Then report the count (``Tally.report``: ``success`` are the good labels)."""
    tally = Tally() if tally is None else tally
    for item in items:
        try:
            label, message = call(item)
        except JobNotFound:
            tally.add(GONE)
        except (DelayQError, RedisError) as exc:
            logger.warning("admin action on %s %s failed: %s", kind, shown(name(item)), shown(exc))
            tally.fail(name(item), exc)
        else:
            tally.add(label)
            if message:
                log(item, message)
    tally.report(modeladmin, request, *success)
    return tally
