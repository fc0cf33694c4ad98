"""A job's workflow on its admin page: the parents it waits for (``after=``) and the
children that wait for it, each a link with its status, from the ``JobDependency``
edges (indexed both ways). Why a child was cancelled is its last error, which names
the parent ("parent <id> ended dead")."""

from __future__ import annotations

from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _

from django_delayq.admin.lineage import job_link
from django_delayq.models import Job, JobDependency

LISTED = 20


def _listed(ids: list[str], total: int, site: str, pending: set[str]) -> str:
    if not ids:
        return "-"
    status = dict(Job.objects.filter(pk__in=ids).values_list("pk", "status"))
    items = format_html_join("", "<li>{} {}{}</li>", (
        (job_link(pk, site), status.get(pk, _("(row deleted)")),
         format_html(' <span class="quiet">{}</span>', _("waited for")) if pk in pending else "")
        for pk in ids))
    more = (format_html("<li>{}</li>", _("… %(n)d in all") % {"n": total})
            if total > len(ids) else "")
    return format_html('<ul class="delayq-lineage">{}{}</ul>', items, more)


def parents(job: Job, site: str = "admin") -> str:
    """The jobs this one waits for; those not finished yet are marked "waited for"."""
    edges = JobDependency.objects.filter(child_id=job.pk).order_by("pk")
    rows = list(edges.values_list("parent_id", "resolved")[:LISTED])
    pending = {pk for pk, resolved in rows if not resolved}
    total = edges.count() if len(rows) == LISTED else len(rows)
    return _listed([pk for pk, _r in rows], total, site, pending)


def children(job: Job, site: str = "admin") -> str:
    """The jobs waiting for this one (or that did)."""
    edges = JobDependency.objects.filter(parent_id=job.pk).order_by("pk")
    ids = list(edges.values_list("child_id", flat=True)[:LISTED])
    total = edges.count() if len(ids) == LISTED else len(ids)
    return _listed(ids, total, site, set())
