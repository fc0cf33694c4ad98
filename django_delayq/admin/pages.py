"""The pages the admin adds beside Django's own (queues, dashboard, Spark report, the
confirmation of a cancel, the reschedule form): each starts from the admin site's
context, the Job model's options, its title and the Job admin's media, under the admin
site's name (``current_app``: its URLs reverse within that site)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.http import HttpRequest
from django.template.response import TemplateResponse

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin


def render(request: HttpRequest, admin: ModelAdmin[Any], template: str, title: object,
           **context: object) -> TemplateResponse:
    """``admin/django_delayq/job/<template>.html`` with ``context`` over the common one."""
    request.current_app = admin.admin_site.name
    return TemplateResponse(request, "admin/django_delayq/job/%s.html" % template, {
        **admin.admin_site.each_context(request), "opts": admin.model._meta, "title": title,
        "media": admin.media, **context})
