"""The Django admin: the job list and detail page (``job_admin``, shown by ``display`` and
``workflow_graph``: workflows and requeue lineage, with buttons for the actions),
permission-gated actions (``actions``, with the reschedule form; they also write the admin's
log), the pages it adds (rendered by ``display``): the queues page (``queue_page``), the
live dashboard (``dashboard``, fed by ``observe.redis_state`` and the audit rows) and the Spark
report pages (``reports``). Django's admin autodiscovery imports this package; importing
``job_admin`` registers the model admins; ``schedule_admin`` the periodic schedules' admin."""

from django_delayq.admin import job_admin, schedule_admin  # noqa: F401
