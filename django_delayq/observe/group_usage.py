"""The groups of some queues as ``delayq_status`` shows them (docs/groups.md): the
groups with the most due jobs, how many of their jobs run, their limits (their own, else
their queue's) and whether they are paused or held back by them (docs/groups.md,
"Limits per group").

Due and running counts come from the rows (one ``GROUP BY`` over the partial index of
the rows that have a group, one for the running ones of those groups), so they lag Redis
by the audit writer's flush; limits from the ``GroupLimit`` rows and the settings; paused
and held groups from Redis (``Engine.paused_groups``, ``Engine.held_groups``).
A database that cannot be read shows no groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import DatabaseError
from django.db.models import Count
from django.utils import timezone

from django_delayq.core.conf import get_settings
from django_delayq.core.limits import parse_rate
from django_delayq.models import GroupLimit, Job, JobStatus
from django_delayq.observe.limit_usage import describe_limit

if TYPE_CHECKING:
    from django_delayq.engine import Engine

SHOWN = 10  # groups shown


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupUsage:
    queue: str
    group: str
    due: int  # rows scheduled or retrying whose due time has come
    running: int
    paused: bool
    held: bool = False  # a limit of its own holds it out of the rotation (Redis)
    limit: str = ""  # "10 per 1s, 2 at once": its own limits, else its queue's; "": none


def busiest(engine: Engine, queues: Sequence[str], shown: int = SHOWN) -> list[GroupUsage]:
    """The ``shown`` groups of ``queues`` with the most due jobs, most first."""
    rows = Job.objects.filter(queue__in=list(queues)).exclude(group="")
    try:
        due = list(rows.filter(status__in=(JobStatus.SCHEDULED, JobStatus.RETRYING),
                               run_at__lte=timezone.now())
                   .values("queue", "group").annotate(n=Count("pk"))
                   .order_by("-n", "queue", "group").values_list("queue", "group", "n")[:shown])
        running = {(q, g): n for q, g, n in rows.filter(
            status=JobStatus.RUNNING, group__in={g for _, g, _ in due})
            .values("queue", "group").annotate(n=Count("pk")).values_list("queue", "group", "n")}
        own = {(r.queue, r.group): r for r in GroupLimit.objects.filter(
            queue__in={q for q, _, _ in due}, group__in={g for _, g, _ in due})}
    except DatabaseError:
        return []
    settings = get_settings()

    def limit(q: str, g: str) -> str:
        rate, concurrency = settings.group_limit(q)
        if (row := own.get((q, g))) is not None:
            rate = parse_rate(row.rate_limit) if row.rate_limit else rate
            concurrency = row.concurrency if row.concurrency is not None else concurrency
        return describe_limit(rate, concurrency)

    queues_shown = {q for q, _, _ in due}
    paused = {q: set(engine.paused_groups(q)) for q in queues_shown}
    held = {q: set(engine.held_groups(q, [g for q2, g, _ in due if q2 == q]))
            for q in queues_shown}
    return [GroupUsage(queue=q, group=g, due=n, running=running.get((q, g), 0),
                       paused=g in paused[q], held=g in held[q], limit=limit(q, g))
            for q, g, n in due]


def lines(groups: Sequence[GroupUsage], printable: Callable[[object], str] = str) -> list[str]:
    """Text lines for ``delayq_status`` (none without groups); ``printable`` escapes."""
    if not groups:
        return []
    return ["", "GROUPS (most due jobs)"] + [
        "  %-16s %-32s due %d, running %d%s%s%s" % (
            u.queue, printable(u.group), u.due, u.running,
            ", limit %s" % u.limit if u.limit else "", ", paused" if u.paused else "",
            ", held by its limit" if u.held else "")
        for u in groups]
