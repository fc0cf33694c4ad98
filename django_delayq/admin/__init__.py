"""The Django admin: the job list and detail page (``job_admin``), permission-gated
actions (``actions``), the reschedule form (``forms``) and the Spark report pages
(``reports``). Django's admin autodiscovery imports this package; importing ``job_admin``
registers the model admins."""

from django_delayq.admin import job_admin  # noqa: F401
