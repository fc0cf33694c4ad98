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


def parents(job: Job, site: str = "admin") -> str:
    """The jobs this one waits for; those not finished yet are marked "waited for"."""
    return _listed(site, "parent_id", child_id=job.pk)


def children(job: Job, site: str = "admin") -> str:
    """The jobs waiting for this one (or that did)."""
    return _listed(site, "child_id", parent_id=job.pk)


def _listed(site: str, other: str, **edge: str) -> str:
    """The jobs at the ``other`` end of the edges ``edge`` selects, each with its status;
    a parent not finished yet is marked "waited for"."""
    edges = JobDependency.objects.filter(**edge).order_by("pk")
    rows = list(edges.values_list(other, "resolved")[:LISTED])
    if not rows:
        return "-"
    total = edges.count() if len(rows) == LISTED else len(rows)
    status = dict(Job.objects.filter(pk__in=[pk for pk, _r in rows]).values_list("pk", "status"))
    items = format_html_join("", "<li>{} {}{}</li>", (
        (job_link(pk, site), status.get(pk, _("(row deleted)")),
         format_html(' <span class="quiet">{}</span>', _("waited for"))
         if other == "parent_id" and not resolved else "")
        for pk, resolved in rows))
    more = (format_html("<li>{}</li>", _("… %(n)d in all") % {"n": total})
            if total > len(rows) else "")
    return format_html('<ul class="delayq-lineage">{}{}</ul>', items, more)
