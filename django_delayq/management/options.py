"""Command-line options shared by the management commands."""

from __future__ import annotations

from django.core.management.base import CommandError

from django_delayq.core.conf import Settings


def parse_queues(value: str | None, settings: Settings) -> tuple[str, ...]:
    """``--queues a,b`` -> the queues, in order; empty means every DELAYQ queue."""
    if not value:
        return settings.queues
    queues = tuple(q.strip() for q in value.split(",") if q.strip())
    unknown = [q for q in queues if q not in settings.queues]
    if unknown:
        raise CommandError("unknown queue(s) %s; DELAYQ['QUEUES'] is %s"
                           % (unknown, list(settings.queues)))
    return queues
