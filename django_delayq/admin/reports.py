"""The Spark report in the admin: the reports under ``DELAYQ['REPORT_DIR']``, newest first,
and one of them shown in a sandboxed frame.

Each report is a subdirectory of ``REPORT_DIR`` holding a ``report.html`` (what
``manage.py delayq_report --out REPORT_DIR/<name>`` writes). Access needs the
``django_delayq.view_report`` permission: a report aggregates every job, with examples of
error messages, and is granted apart from the rows themselves.

Files are served from names this module listed itself, never from a path taken from the
request: a request names a report (a directory entry it found) and a file (``report.html``
or a chart ``*.png`` found in that report's directory); both are resolved, symlinks
included, and must stay inside ``REPORT_DIR``. Anything else is a 404. The page is served
with a Content-Security-Policy that allows no script, no request anywhere, only its inline
style and its inline (``data:``) or same-origin images, and ``X-Content-Type-Options:
nosniff``; the charts ``report.py`` writes are inlined in the page and also lie beside it as
PNG files, which are served under the same checks.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.contrib.admin import ModelAdmin
from django.contrib.auth.decorators import permission_required
from django.http import FileResponse, Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.clickjacking import xframe_options_sameorigin

from django_delayq.admin import display
from django_delayq.core.conf import get_settings

logger = logging.getLogger(__name__)

PERMISSION = "django_delayq.view_report"
REPORT_FILE = "report.html"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".png": "image/png"}
PAGE_POLICY = ("default-src 'none'; img-src data: 'self'; style-src 'unsafe-inline'; "
               "base-uri 'none'; form-action 'none'; frame-ancestors 'self'; sandbox")
IMAGE_POLICY = "default-src 'none'; frame-ancestors 'self'; sandbox"


@dataclass(frozen=True, slots=True)
class Report:
    name: str
    directory: Path
    modified_at: datetime  # of its report.html


def report_root() -> Path | None:
    """``REPORT_DIR`` resolved, or None when unset."""
    configured = get_settings().report_dir
    return None if configured is None else Path(configured).resolve()


def _inside(root: Path, candidate: Path) -> Path | None:
    """``candidate`` with every symlink resolved, if it stays under ``root``."""
    try:
        resolved = candidate.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a symlink loop
        return None
    return resolved if resolved.is_relative_to(root) and resolved != root else None


def list_reports(root: Path) -> list[Report]:
    """The subdirectories of ``root`` holding a report.html, newest first."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    found = []
    for entry in entries:
        directory = _inside(root, Path(entry.path))
        page = _inside(root, Path(entry.path) / REPORT_FILE)
        if directory is None or page is None or not directory.is_dir() or not page.is_file():
            continue
        found.append(Report(entry.name, Path(entry.path),
                            datetime.fromtimestamp(page.stat().st_mtime, tz=UTC)))
    return sorted(found, key=lambda r: (-r.modified_at.timestamp(), r.name))


def report_files(root: Path, report: Report) -> dict[str, Path]:
    """The files of ``report`` that may be served: its page and its PNG charts."""
    names = [REPORT_FILE, *sorted(p.name for p in report.directory.glob("*.png"))]
    found = {name: _inside(root, report.directory / name) for name in names}
    return {name: path for name, path in found.items() if path is not None and path.is_file()}


def _find(root: Path | None, name: str) -> Report:
    for report in list_reports(root) if root is not None else []:
        if report.name == name:
            return report
    raise Http404("no such report")


@permission_required(PERMISSION, raise_exception=True)
def report_page(request: HttpRequest, admin: ModelAdmin[Any]) -> TemplateResponse:
    """The list of reports, and the one asked for (``?report=NAME``; else the newest)."""
    root = report_root()
    reports = list_reports(root) if root is not None else []
    wanted = request.GET.get("report")
    shown = _find(root, wanted) if wanted is not None else (reports[0] if reports else None)
    return display.render(
        request, admin, "report", _("Spark report"), report_dir=root, reports=reports,
        shown=shown, frame_url=None if shown is None else file_url(shown.name, REPORT_FILE),
        charts=[] if shown is None or root is None else
        [(n, file_url(shown.name, n)) for n in report_files(root, shown) if n != REPORT_FILE])


def file_url(name: str, filename: str) -> str:
    return reverse("admin:django_delayq_job_report_file", args=("%s/%s" % (name, filename),))


@xframe_options_sameorigin
@permission_required(PERMISSION, raise_exception=True)
def report_file(request: HttpRequest, subpath: str) -> FileResponse:
    """One file of one listed report, with a restrictive policy; 404 for anything else.

    ``subpath`` is ``NAME/FILE`` and takes every character after ``report/`` (slashes
    included), so that no malformed request falls through to another admin URL.
    """
    name, _slash, filename = subpath.partition("/")
    root = report_root()
    report = _find(root, name)
    path = None if root is None else report_files(root, report).get(filename)
    if path is None:
        logger.warning("report file refused: %r in report %r", filename, name)
        raise Http404("no such report file")
    response = FileResponse(path.open("rb"), content_type=CONTENT_TYPES[path.suffix])
    response["Content-Security-Policy"] = (PAGE_POLICY if path.suffix == ".html"
                                           else IMAGE_POLICY)
    response["X-Content-Type-Options"] = "nosniff"
    response["Referrer-Policy"] = "no-referrer"
    return response

