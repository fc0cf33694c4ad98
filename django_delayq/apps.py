from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DelayQConfig(AppConfig):
    name = "django_delayq"
    label = "django_delayq"
    verbose_name = _("Delayed jobs")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # checks and redis_checks register system checks; events and metrics connect
        # signal receivers (metrics only when prometheus-client is installed).
        from django_delayq import checks, conf, events, metrics, redis_checks  # noqa: F401
