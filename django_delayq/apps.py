from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DelayQConfig(AppConfig):
    name = "django_delayq"
    label = "django_delayq"
    verbose_name = _("Delayed jobs")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # checks registers the system checks; events and counters connect signal receivers,
        # prometheus its gauges (both only when prometheus-client is installed).
        # The hooks the core takes from the surface above it: eager mode, and how a
        # Django Tasks ``Task`` that takes a context is called (when Tasks is installed).
        # Imported here, not at the top: apps.py is imported before the models load, and
        # testing, api (through workflows and row_insert) and checks import them.
        from django_delayq import compat, testing  # lazy: models load after apps.py
        from django_delayq.core import api, commit_batch, conf, events  # needs models  # noqa: F401
        from django_delayq.observe import checks, counters, prometheus  # needs models  # noqa: F401

        commit_batch.set_eager_runner(testing.run_eager)
        if compat.tasks is not None:
            from django_delayq import backends  # lazy: with Tasks only  # noqa: F401
