"""The Django admin: the job list and detail page (``job_admin``), permission-gated
actions (``actions``) and the reschedule form (``forms``). Django's admin autodiscovery
imports this package; importing ``job_admin`` registers the model admins."""

from django_delayq.admin import job_admin  # noqa: F401
