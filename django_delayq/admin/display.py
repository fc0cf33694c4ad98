"""How the job admin shows values: status colours, error lines (the time limit's
``JobTimeout`` marked as such), timestamps to the second, short escaped error texts, and
stored values of any size and depth (``core.stored``), escaped and cut.

And ``render``, for the pages the admin adds beside Django's own (queues, dashboard, Spark
report, the confirmation of a cancel, the reschedule form): each starts from the admin
site's context, the Job model's options, its title and the Job admin's media, under the
admin site's name (``current_app``: its URLs reverse within that site).

And a stored traceback as the job's page shows it (``traceback_html``): whole (no height
limit, long lines wrapped), the exception first, then the frames, where each run of the
worker's own frames (files inside the ``django_delayq`` package: the runner that called
the job) is folded into one ``<details>`` line. Everything is escaped; a text that is not
a Python traceback is shown as it is."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_delayq.core import stored, validation
from django_delayq.models import JobStatus, aware_datetime

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin
    from django_stubs_ext import StrOrPromise

STATUS_COLOURS = {
    JobStatus.SCHEDULED: "#417690",
    JobStatus.RUNNING: "#b8860b",
    JobStatus.RETRYING: "#d2691e",
    JobStatus.SUCCEEDED: "#2e7d32",
    JobStatus.DEAD: "#ba2121",
    JobStatus.CANCELLED: "#666",
    JobStatus.EXPIRED: "#7b5ea7",
}
#: The ``error_type`` of an attempt stopped by its time limit.
TIMEOUT_ERROR = "django_delayq.exceptions.JobTimeout"
SHORT_ERROR_CHARS = 80
TITLE_ERROR_CHARS = 300  # the hover title of the list's error: the message's first 300
SHOWN_CHARS = 100_000  # of one stored value on a job's page
#: ``duration``'s format, its milliseconds, the durations it is used below; else hours
DURATIONS = (("%.0f ms", 1, 1000), ("%.3g s", 1000, 120_000), ("%.1f min", 60_000, 7_200_000))
LINK = "delayq-job-link"  # the class of the links in lists of jobs (as the dashboard's)


def column(label: StrOrPromise, show: Callable[[Any], str],
           ordering: str | None = None) -> Callable[[Any, Any], str]:
    """A display method (a list column or a read-only field) showing ``show(obj)``,
    sortable by the field ``ordering``."""
    return admin.display(description=label, ordering=ordering)(lambda self, obj: show(obj))


def error_line(error_type: str, message: str) -> str:
    """``error_type`` in code type beside its message, both escaped ("" without either);
    an attempt stopped by its time limit is marked "timed out" first."""
    return _error("_error", error_type, message) if error_type else message


def short_error(error_type: str, message: str) -> str:
    """One escaped line for the list: "timed out" or the class name, and the message's
    first line cut to ``SHORT_ERROR_CHARS``, its title the message's first
    ``TITLE_ERROR_CHARS`` (every line); "-" without an error."""
    if not error_type and not message:
        return "-"
    return _error("_short_error", error_type, message, short=True)


def _error(template: str, error_type: str, message: str, short: bool = False) -> str:
    """The error ``template``; the message of a timed-out attempt without its own leading
    "timed out: " (the mark says it already: never "timed out timed out: ..."); ``short``:
    its first line cut, the title its first ``TITLE_ERROR_CHARS``."""
    timed_out = error_type == TIMEOUT_ERROR
    if timed_out and message.lower().startswith("timed out: "):
        message = message[len("timed out: "):]
    title = Truncator(message).chars(TITLE_ERROR_CHARS) if short else ""
    if short:
        message = Truncator((message.splitlines() or [""])[0]).chars(SHORT_ERROR_CHARS)
    return render_to_string("admin/django_delayq/job/%s.html" % template, {
        "type": error_type, "name": error_type.rsplit(".", 1)[-1], "message": message,
        "timed_out": timed_out, "title": title})


def pre(value: object) -> str:
    """A stored value in a ``<pre>``, escaped: JSON indented, a value too deeply nested to
    parse (``stored.Raw``) as its text, marked; cut to ``SHOWN_CHARS``."""
    if value in (None, "", [], {}):
        return "-"
    notes = []
    if isinstance(value, stored.Raw):
        text = value.text
        notes.append(_("nested more than %(depth)d levels deep: shown as stored") % {
            "depth": validation.MAX_DEPTH})
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    if len(text) > SHOWN_CHARS:
        notes.append(_("%(n)d characters in all; the first %(shown)d shown") % {
            "n": len(text), "shown": SHOWN_CHARS})
        text = text[:SHOWN_CHARS] + "\u2026"
    return render_to_string("admin/django_delayq/job/_pre.html",
                            {"note": "; ".join(map(str, notes)), "text": text})


def seconds(value: datetime | None, shown: str = "%Y-%m-%d %H:%M:%S") -> str:
    """A timestamp in the current time zone to the second, ``2026-11-23 19:24:07``, in a
    ``<time>`` element whose title names the zone (``2026-11-23 19:24:07 CET``)."""
    if value is None:
        return "-"
    local = timezone.localtime(aware_datetime(value))  # naive: USE_TZ = False's rows
    return format_html('<time datetime="{}" title="{}">{}</time>', local.isoformat(),
                       zoned(local), local.strftime(shown))


def short_seconds(value: datetime | None) -> str:
    """For the list: ``11-23 19:24:07`` (the year and the zone in the title)."""
    return seconds(value, "%m-%d %H:%M:%S")


def duration(ms: float | None) -> str:
    """``250 ms``, ``1.25 s``, ``3.5 min``, ``2.0 h``; "-" for none."""
    if ms is None:
        return "-"
    shown, per = next(((f, p) for f, p, below in DURATIONS if abs(ms) < below),
                      ("%.1f h", 3_600_000))
    return shown % (ms / per)


def zoned(value: datetime) -> str:
    """``2026-11-23 19:24:07 CET (Europe/Berlin)``: the time, its abbreviation, its zone."""
    key = getattr(value.tzinfo, "key", None) or str(value.tzinfo)
    abbrev = value.strftime("%Z")
    label = abbrev if abbrev == key else "%s (%s)" % (abbrev, key)
    return "%s %s" % (value.strftime("%Y-%m-%d %H:%M:%S"), label)


def job_link(job_id: str, text: object = None, site: str = "admin", css: str = "") -> str:
    """A link to the job's page showing ``text`` (default: the id); "-" without an id."""
    if not job_id:
        return "-"
    url = job_url(site, "change", job_id)
    attrs = format_html(' class="{}"', css) if css else ""
    return format_html('<a href="{}"{}>{}</a>', url, attrs, job_id if text is None else text)


def job_url(site: str, name: str, *args: object) -> str:
    """The URL of the Job admin's page ``name`` (``change``, ``queues``, ...) on ``site``."""
    return reverse("admin:django_delayq_job_" + name, args=args, current_app=site)


def job_list(items: list[tuple[object, object, object]], more: object = "") -> str:
    """A ``<ul>`` of (link, text, note) items, ``more`` last; escaped by the template."""
    return render_to_string("admin/django_delayq/job/_job_list.html",
                            {"items": items, "more": more})


def status_badge(status: str, label: object) -> str:
    colour = STATUS_COLOURS.get(JobStatus(status), "#666")
    return format_html('<span class="delayq-status" style="color:{}">{}</span>', colour, label)


def render(request: HttpRequest, admin: ModelAdmin[Any], template: str, title: object,
           **context: object) -> TemplateResponse:
    """``admin/django_delayq/job/<template>.html`` with ``context`` over the common one."""
    request.current_app = admin.admin_site.name
    return TemplateResponse(request, "admin/django_delayq/job/%s.html" % template, {
        **admin.admin_site.each_context(request), "opts": admin.model._meta, "title": title,
        "media": admin.media, **context})


# -- tracebacks ---------------------------------------------------------------------------

FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line \d+')
OWN = re.compile(r"[\\/]django_delayq[\\/]")


@dataclass(frozen=True, slots=True)
class Part:
    text: str
    own: bool = False  # a frame of the worker's own code
    frame: bool = False


def parts(text: str) -> list[Part]:
    """``text`` cut into frames (a ``File`` line and the indented lines under it) and
    the lines between them (headers, chain notes, the exception)."""
    out: list[Part] = []
    lines, i = text.splitlines(), 0
    while i < len(lines):  # a frame takes the lines indented deeper, up to the next frame
        match, j = FRAME.match(lines[i]), i + 1
        while (match and j < len(lines) and _indent(lines[j]) > _indent(lines[i])
               and not FRAME.match(lines[j])):
            j += 1
        out.append(Part("\n".join(lines[i:j]), own=bool(match and OWN.search(match["file"])),
                        frame=match is not None))
        i = j
    return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip()) if line.strip() else 10**6


def exception_lines(found: list[Part]) -> str:
    """The lines after the last frame: the exception raised (with its message)."""
    last = max((i for i, p in enumerate(found) if p.frame), default=-1)
    return "\n".join(p.text for p in found[last + 1:]).strip()


def traceback_html(text: str | None) -> str:
    """The traceback as HTML (escaped), or "-" without one: each run of the worker's own
    frames folded into one ``<details>`` line, the other lines as they are."""
    if not text:
        return "-"
    found = parts(text)
    runs: list[tuple[str, str]] = []  # (the fold's summary, or "" for lines shown; text)
    for own, group in groupby(found, key=lambda part: part.frame and part.own):
        texts = [p.text for p in group]
        fold = ngettext("%d frame of django_delayq (the worker)",
                        "%d frames of django_delayq (the worker)", len(texts)) % len(texts)
        runs.append((fold, "\n".join(texts)) if own else ("", "\n".join(texts) + "\n"))
    if runs and not runs[-1][0]:  # no newline after the last line
        runs[-1] = ("", runs[-1][1].rstrip("\n"))
    return render_to_string("admin/django_delayq/job/_traceback.html",
                            {"head": exception_lines(found), "runs": runs})
