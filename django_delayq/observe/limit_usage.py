"""The callable limits of ``DELAYQ['CALLABLE_LIMITS']`` with what each runs now, read
through the engine (``Engine.limit_state``: the grants of the window and the slots held,
on the Redis clock): one reading for the admin's queues page (``admin/overview.py``) and
``manage.py delayq_status``, each of which only formats it.

The limits of the groups of some queues (docs/groups.md, "Limits"): each queue's
defaults and the groups' own, read once and named one way (``group_limit_text``) for the
queues page and ``manage.py delayq_queue list``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.utils.translation import gettext

from django_delayq.core import group_limits
from django_delayq.core.limits import rate_text

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.core.group_limits import GroupOverride
    from django_delayq.core.limits import Rate
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
        """``"100 per 60s, 5 at once"`` (the admin's queues page)."""
        return describe_limit(self.rate, self.concurrency)


def callable_limits(engine: Engine, settings: Settings) -> list[CallableLimitState]:
    """Each callable of ``DELAYQ['CALLABLE_LIMITS']`` (sorted by path): its limit and what
    it runs now."""
    out = []
    for path, entry in sorted(settings.callable_limits.items()):
        rate, concurrency = entry.rate, entry.concurrency
        state = engine.limit_state(path, rate=rate, concurrency=concurrency)
        out.append(CallableLimitState(callable=path, rate=rate, concurrency=concurrency,
                                      running=state.running,
                                      started_in_window=state.started_in_window))
    return out


def describe_limit(rate: Sequence[int] | None, concurrency: int | None,
                   none: str = "") -> str:
    """``"100 per 60s, 5 at once"``; ``none`` without either."""
    parts = []
    if rate is not None:
        parts.append("%d per %gs" % (rate[0], rate[1] / 1000))
    if concurrency is not None:
        parts.append("%d at once" % concurrency)
    return ", ".join(parts) or none


def group_limit_text(concurrency: int | None, rate: str | None, missing: str = "-") -> str:
    """``"concurrency 3, rate 10/s"``: a group's limits; ``missing`` names one not set
    (``"default"`` in an override: its queue's then)."""
    return gettext("concurrency %(c)s, rate %(r)s") % {
        "c": missing if concurrency is None else concurrency, "r": rate or missing}


def queue_group_limits(settings: Settings,
                       queues: Sequence[str]) -> dict[str, tuple[str, list[GroupOverride]]]:
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
