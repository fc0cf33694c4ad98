"""System checks: ``manage.py check`` reports every bad DELAYQ value before a worker starts."""

from __future__ import annotations

from typing import Any

from django.core import checks

from django_delayq import conf

HINT = "See docs/settings.md for the accepted values."


@checks.register("delayq")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        found = conf.problems()
    except Exception as exc:  # DELAYQ is not even a dict
        return [checks.Error(str(exc), hint=HINT, id="delayq.E000")]
    return [
        checks.Error(message, hint=HINT, obj="DELAYQ[%r]" % key, id="delayq.E%03d" % (i + 1))
        for i, (key, message) in enumerate(found)
    ]
