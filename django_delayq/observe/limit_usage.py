"""The callable limits of ``DELAYQ['CALLABLE_LIMITS']`` with what each runs now, read
through the engine (``Engine.limit_state``: the grants of the window and the slots held,
on the Redis clock): one reading for the admin's queues page (``admin/queue_page.py``) and
``manage.py delayq_status``, each of which only formats it.

The limits of the groups of some queues (docs/groups.md, "Limits"): each queue's
defaults and the groups' own, read once and named one way (``group_limit_text``) for the
queues page and ``manage.py delayq_queue list``.

And the busiest groups of some queues (``busiest``), as ``delayq_status``, the dashboard
and the metrics show them (docs/groups.md): the groups with the most due jobs, how many
of their jobs run, their limits (their own, else their queue's) and whether they are
paused or held back by them (docs/groups.md, "Limits per group").

Due and running counts come from the rows (one ``GROUP BY`` over the partial index of
the rows that have a group, one for the running ones of those groups), so they lag Redis
by the audit writer's flush; limits from the ``GroupLimit`` rows and the settings; paused
and held groups from Redis (``Engine.paused_groups``, ``Engine.held_groups``).
A database that cannot be read shows no groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import DatabaseError
from django.db.models import Count
from django.utils import timezone
from django.utils.translation import gettext

from django_delayq.core import group_limits
from django_delayq.core.conf import Settings, get_settings
from django_delayq.core.limits import Rate, parse_rate, rate_text
from django_delayq.models import GroupLimit, Job, JobStatus

if TYPE_CHECKING:
    from django_delayq.engine import Engine


@dataclass(frozen=True, slots=True, kw_only=True)
class CallableLimitState:
    callable: str  # the dotted path
    rate: Rate | None  # (starts, per_ms)
    concurrency: int | None
    running: int  # slots held now
    started_in_window: int  # grants within the rate's window

    @property
    def limit(self) -> str:
        """``"100/m, 5 at once"`` (the admin's queues page)."""
        return describe_limit(self.rate, self.concurrency)


def callable_limits(engine: Engine, settings: Settings) -> list[CallableLimitState]:
    """Each callable of ``DELAYQ['CALLABLE_LIMITS']`` (sorted by path): its limit and what
    it runs now."""
    found = ((path, e, engine.limit_state(path, rate=e.rate, concurrency=e.concurrency))
             for path, e in sorted(settings.callable_limits.items()))
    return [CallableLimitState(callable=path, rate=e.rate, concurrency=e.concurrency,
                               running=s.running, started_in_window=s.started_in_window)
            for path, e, s in found]


def describe_limit(rate: Sequence[int] | None, concurrency: int | None,
                   none: str = "") -> str:
    """``"100/m, 5 at once"``: the rate as the settings and ``delayq_queue`` spell it
    (``rate_text``); ``none`` without either."""
    parts = [] if rate is None else [rate_text((rate[0], rate[1]))]
    parts += [] if concurrency is None else ["%d at once" % concurrency]
    return ", ".join(parts) or none


def group_limit_text(concurrency: int | None, rate: str | None, missing: str = "-") -> str:
    """``"concurrency 3, rate 10/s"``: a group's limits; ``missing`` names one not set
    (``"default"`` in an override: its queue's then)."""
    return gettext("concurrency %(c)s, rate %(r)s") % {
        "c": missing if concurrency is None else concurrency, "r": rate or missing}


def queue_group_limits(settings: Settings, queues: Sequence[str]
                       ) -> dict[str, tuple[str, list[group_limits.GroupOverride]]]:
    """The queues of ``queues`` whose groups have limits: each one's defaults for its
    groups (``group_limit_text``; "" without any) and the groups' own (in one query)."""
    overrides = group_limits.by_queue(q for q in queues if q not in settings.queue_shards)
    out = {}
    for queue in queues:
        rate, concurrency = settings.group_limit(queue)
        defaults = "" if rate is None and concurrency is None else group_limit_text(
            concurrency, rate_text(rate))
        if defaults or overrides.get(queue):
            out[queue] = (defaults, overrides.get(queue, []))
    return out


SHOWN = 10  # groups shown


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupUsage:
    queue: str
    group: str
    due: int  # rows scheduled or retrying whose due time has come
    running: int
    paused: bool
    held: bool = False  # a limit of its own holds it out of the rotation (Redis)
    limit: str = ""  # "10/s, 2 at once": its own limits, else its queue's; "": none


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

