"""The reschedule form of the admin: a delay in seconds, or a date-time."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

MAX_DELAY_SECONDS = 10 * 365 * 24 * 3600


class RescheduleForm(forms.Form):
    delay = forms.FloatField(
        label=_("Delay (seconds from now)"), required=False, min_value=0,
        max_value=MAX_DELAY_SECONDS, widget=forms.NumberInput(attrs={"step": "any"}))
    at = forms.DateTimeField(
        label=_("Or at (date and time)"), required=False,
        help_text=_("In the current time zone, e.g. 2030-01-31 09:00."),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        delay, at = data.get("delay"), data.get("at")
        if self.errors:
            return data
        if (delay is None) == (at is None):
            raise forms.ValidationError(_("Give either a delay or a date and time, not both."),
                                        code="one_of")
        return data  # a naive "at" is already aware: DateTimeField reads it in the current zone

    def when(self) -> dict[str, float | datetime]:
        """Keyword arguments for ``api.reschedule``: ``delay=`` or ``at=``."""
        if self.cleaned_data.get("at") is not None:
            return {"at": self.cleaned_data["at"]}
        return {"delay": float(self.cleaned_data["delay"])}

    def describe(self) -> str:
        """The new due time, absolute (it stays true in the admin's log): ``2030-01-31
        09:00:00 UTC``; for a delay, the time it gives from now, and the delay."""
        at = self.cleaned_data.get("at")
        if at is not None:
            return timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S %Z")
        delay = timedelta(seconds=float(self.cleaned_data["delay"]))
        due = timezone.localtime(timezone.now() + delay)
        return "%s (in %s)" % (due.strftime("%Y-%m-%d %H:%M:%S %Z"), delay)
