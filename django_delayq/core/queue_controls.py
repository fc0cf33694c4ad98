"""One operator control of a queue, or of one group of it, for every surface that offers
them (the admin's queues page, ``manage.py delayq_queue``): pause, resume and purge
(``core.queues``), a group's own limits set or lifted (``core.group_limits``: limit,
unlimit). What it did comes back as data (``Control``); each surface words it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django_delayq.core import group_limits, queues
from django_delayq.exceptions import InvalidJob

CONTROLS = ("pause", "resume", "purge", "limit", "unlimit")
TOGGLES = {"pause": (queues.pause_queue, queues.pause_group),  # (on a queue, on one group)
           "resume": (queues.resume_queue, queues.resume_group)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Control:
    changed: bool  # paused, resumed, a job purged, limits set or lifted
    removed: int = 0  # purge: the waiting jobs removed, their rows cancelled
    ticks_kept: int = 0  # purge of a whole queue: periodic schedules' next ticks kept
    limits: group_limits.GroupOverride | None = None  # limit: the group's own limits now


def control(op: str, queue: str, group: str | None = None, *, concurrency: int | None = None,
            rate_limit: str | None = None) -> Control:
    """Perform ``op`` (one of ``CONTROLS``) on ``queue``, or on its ``group`` (a group id
    as typed: a blank one is refused, never taken for the whole queue); limit and unlimit
    act on a group only, limit with ``concurrency`` and ``rate_limit``. An ``InvalidJob``
    names a bad queue, group, limit or operation."""
    if op in TOGGLES:
        on_queue, on_group = TOGGLES[op]
        return Control(changed=on_queue(queue) if group is None else on_group(queue, group))
    if op == "purge" and group is not None:
        removed = queues.purge_group(queue, group)
        return Control(changed=removed > 0, removed=removed)
    if op == "purge":
        report = queues.purge_queue_report(queue)
        return Control(changed=report.removed > 0, removed=report.removed,
                       ticks_kept=report.ticks_kept)
    if op == "unlimit":  # a group's only: none given is refused as a blank one
        return Control(changed=group_limits.clear_group_limit(queue, group or ""))
    if op == "limit":
        return Control(changed=True, limits=group_limits.set_group_limit(
            queue, group or "", concurrency=concurrency, rate_limit=rate_limit))
    raise InvalidJob("unknown control %r; the controls are %s" % (op, ", ".join(CONTROLS)))
