"""Requeue lineage on a job's page, both ways: the job a requeue copied (``requeued_from``)
and the jobs requeued from this one (an indexed lookup on ``requeued_from``). Where a
requeue under the same id started the attempts over is marked in the attempt history
(``job_admin.JobAttemptInline.requeue_mark``)."""

from __future__ import annotations

from django.utils.translation import gettext as _

from django_delayq.admin.display import LINK, job_link, job_list, seconds
from django_delayq.models import Job

COPIES_LISTED = 20


def requeued_from(job: Job, admin_site: str = "admin") -> str:
    """A link to the original of a copy made by a requeue; "-" for an original."""
    return job_link(job.requeued_from, site=admin_site, css=LINK) if job.requeued_from else "-"


def requeued_as(job: Job, admin_site: str = "admin") -> str:
    """Links to the jobs copied from ``job`` by a requeue, oldest first (at most 20)."""
    copies = list(Job.objects.filter(requeued_from=job.pk).order_by("created_at")
                  .values_list("pk", "status", "created_at")[:COPIES_LISTED + 1])
    if not copies:
        return "-"
    return job_list([(job_link(pk, site=admin_site, css=LINK), status, seconds(created))
                     for pk, status, created in copies[:COPIES_LISTED]],
                    _("… and more") if len(copies) > COPIES_LISTED else "")

