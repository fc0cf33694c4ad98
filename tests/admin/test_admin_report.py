"""The Spark report in the admin: permission, listing, serving, and refused paths.

Reports are real files under a temporary ``REPORT_DIR``: small hand-written pages for the
view's own behaviour, and one page written by the real ``manage.py delayq_report`` when
Java and PySpark are present.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.urls import reverse

from django_delayq.observe import checks
from tests.helpers import staff_client as _staff

pytestmark = pytest.mark.django_db

PAGE = "admin:django_delayq_job_report"
CHANGELIST = "admin:django_delayq_job_changelist"
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16


def _file_url(subpath: str) -> str:
    return reverse(PAGE) + subpath


def _write_report(directory: Path, title: str, mtime: float) -> None:
    directory.mkdir(parents=True)
    (directory / "report.html").write_text("<html><body><h1>%s</h1></body></html>" % title)
    (directory / "lateness.png").write_bytes(PNG)
    for path in (directory / "report.html", directory / "lateness.png"):
        os.utime(path, (mtime, mtime))


@pytest.fixture
def report_dir(settings, tmp_path: Path) -> Path:
    """Two reports (``old``, ``new``), and outside the directory a page and a chart that
    two symlinks inside it point to."""
    root = tmp_path / "reports"
    _write_report(root / "old", "old report", 1_700_000_000)
    _write_report(root / "new", "new report", 1_700_086_400)
    (root / "notes").mkdir()  # no report.html: not a report
    outside = tmp_path / "outside"
    _write_report(outside, "secret report", 1_800_000_000)
    (root / "escape").symlink_to(outside, target_is_directory=True)
    (root / "new" / "leak.png").symlink_to(outside / "lateness.png")
    settings.DELAYQ = {**settings.DELAYQ, "REPORT_DIR": str(root)}
    return root


def test_staff_without_the_permission_is_refused(report_dir):
    client = _staff()
    assert client.get(reverse(PAGE)).status_code == 403
    assert client.get(_file_url("new/report.html")).status_code == 403
    changelist = client.get(reverse(CHANGELIST)).content.decode()
    assert "delayq-report-link" not in changelist


def test_reports_are_listed_newest_first_and_the_newest_shown(report_dir):
    client = _staff("view_report")
    assert 'class="delayq-report-link"' in client.get(reverse(CHANGELIST)).content.decode()
    response = client.get(reverse(PAGE))
    assert response.status_code == 200
    assert [r.name for r in response.context["reports"]] == ["new", "old"]
    assert response.context["shown"].name == "new"
    html = response.content.decode()
    assert 'src="%s"' % _file_url("new/report.html") in html and "<iframe" in html
    assert [name for name, _ in response.context["charts"]] == ["lateness.png"]
    chosen = client.get(reverse(PAGE) + "?report=old")
    assert chosen.context["shown"].name == "old"


def test_a_report_and_its_chart_are_served_with_restrictive_headers(report_dir):
    client = _staff("view_report")
    page = client.get(_file_url("new/report.html"))
    assert page.status_code == 200
    assert b"".join(page.streaming_content) == (report_dir / "new" / "report.html").read_bytes()
    assert page["Content-Type"] == "text/html; charset=utf-8"
    assert page["X-Content-Type-Options"] == "nosniff"
    policy = page["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "sandbox" in policy
    assert "script-src" not in policy  # falls back to default-src 'none'
    assert page["X-Frame-Options"] == "SAMEORIGIN"
    chart = client.get(_file_url("new/lateness.png"))
    assert chart.status_code == 200 and chart["Content-Type"] == "image/png"
    assert b"".join(chart.streaming_content) == PNG
    assert chart["X-Content-Type-Options"] == "nosniff"
    assert chart["Content-Security-Policy"].startswith("default-src 'none'")


@pytest.mark.parametrize("subpath", [
    "../report.html",  # the parent of REPORT_DIR as a report name
    "new/../old/report.html",
    "new/..%2F..%2Foutside%2Freport.html",
    "..%2Foutside/report.html",
    "%2Fetc%2Fpasswd",  # absolute paths, as a name and as a file
    "new/%2Fetc%2Fpasswd",
    "new//etc/passwd",
    "escape/report.html",  # a symlink to a directory outside
    "new/leak.png",  # a symlink to a file outside
    "new/report.json",  # not a file the view lists
    "notes/report.html",
    "missing/report.html",
    "new",
])
def test_paths_outside_the_listed_files_are_404(report_dir, subpath):
    (report_dir / "new" / "report.json").write_text("{}")
    client = _staff("view_report")
    assert client.get(_file_url(subpath)).status_code == 404


@pytest.mark.parametrize("name", ["..", "escape", "/etc", "../outside", "notes"])
def test_unknown_report_names_on_the_page_are_404(report_dir, name):
    client = _staff("view_report")
    assert client.get(reverse(PAGE), {"report": name}).status_code == 404


def test_symlinks_outside_are_not_listed(report_dir):
    response = _staff("view_report").get(reverse(PAGE))
    assert "escape" not in [r.name for r in response.context["reports"]]
    assert "leak.png" not in dict(response.context["charts"])
    assert "secret report" not in response.content.decode()


def test_without_report_dir_the_link_is_hidden_and_the_page_explains(settings):
    settings.DELAYQ = {k: v for k, v in settings.DELAYQ.items() if k != "REPORT_DIR"}
    client = _staff("view_report")
    assert "delayq-report-link" not in client.get(reverse(CHANGELIST)).content.decode()
    page = client.get(reverse(PAGE))
    assert page.status_code == 200 and 'DELAYQ["REPORT_DIR"]' in page.content.decode()
    assert client.get(_file_url("new/report.html")).status_code == 404


def test_an_empty_or_missing_directory_says_how_to_write_a_report(settings, tmp_path):
    settings.DELAYQ = {**settings.DELAYQ, "REPORT_DIR": str(tmp_path / "not-yet")}
    page = _staff("view_report").get(reverse(PAGE))
    assert page.status_code == 200 and "delayq_report --out" in page.content.decode()


@pytest.mark.parametrize("value", ["relative/dir", 42, ""])
def test_report_dir_must_be_none_or_an_absolute_path(settings, value):
    settings.DELAYQ = {"QUEUES": ["default"], "ALLOWED_CALLABLES": ["tests.jobs"],
                       "REPORT_DIR": value}
    [error] = checks.check_settings()
    assert (error.id, error.obj) == ("delayq.E027", "DELAYQ['REPORT_DIR']")
    assert repr(value) in error.msg and error.hint == checks.HINTS["REPORT_DIR"]


def test_report_dir_accepts_an_absolute_path_or_none(settings, tmp_path):
    for value in (None, str(tmp_path), tmp_path):
        settings.DELAYQ = {"QUEUES": ["default"], "ALLOWED_CALLABLES": ["tests.jobs"],
                           "REPORT_DIR": value}
        assert checks.check_settings() == []
