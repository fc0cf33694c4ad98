from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DelayQConfig(AppConfig):
    name = "django_delayq"
    label = "django_delayq"
    verbose_name = _("Delayed jobs")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_delayq import checks, conf, events  # noqa: F401  (checks, signal hooks)
        from django_delayq import redis_checks  # noqa: F401  (Redis eviction/persistence)
        from django_delayq import metrics  # noqa: F401  (Prometheus receivers, if installed)
