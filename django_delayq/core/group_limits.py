"""Per-group limits: every group's defaults from the settings, one group's override at
run time (docs/groups.md, "Limits").

* ``set_group_limit(queue, group, concurrency=..., rate_limit=...)``: the group's own
  limits, a field not given keeping the queue's default
  (``QUEUE_OPTIONS[queue]["group_concurrency"]``, ``["group_rate_limit"]``);
  ``clear_group_limit(queue, group)`` gives the group back its defaults;
  ``group_limits(queue)`` lists the overrides.
* **The row, then Redis.** An override is a ``GroupLimit`` row (the durable copy) and a
  field of the queue's ``group_limits`` hash in Redis (what claim.lua enforces): the row is
  written first, Redis when the row's transaction commits (at once in autocommit). The
  reconciler (``sync``, each pass of ``core/reconcile.py``) writes Redis again from the rows
  where they differ: after a Redis loss, a Redis write that failed, or two calls whose
  Redis writes crossed; it also writes a queue's limits from the settings when Redis lost
  them (the workers write them only at start-up).

A bad value is an ``InvalidJob`` naming it; a queue not in the settings too; a sharded
queue takes no group limit (each shard would count its own).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from django.db import router, transaction

from django_delayq.core import limits, option_checks
from django_delayq.core.conf import Settings, get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine.controls import override_value
from django_delayq.engine.replies import grouped
from django_delayq.exceptions import InvalidJob
from django_delayq.models import GroupLimit

if TYPE_CHECKING:
    from django_delayq.engine import Engine

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupOverride:
    """One group's limits where they differ from its queue's defaults: ``concurrency``
    (jobs in flight at once), ``rate_limit`` (claims per window, ``"10/s"``); None keeps
    the queue's default."""

    queue: str
    group: str
    concurrency: int | None = None
    rate_limit: str | None = None


def set_group_limit(queue: str, group: str, *, concurrency: int | None = None,
                    rate_limit: str | None = None) -> GroupOverride:
    """Give ``group`` of ``queue`` its own limits (a field left None keeps the queue's
    default); the row is written, Redis when it commits. Returns the override."""
    override = _checked(queue, group, concurrency, rate_limit)
    using = router.db_for_write(GroupLimit)
    with transaction.atomic(using=using):
        GroupLimit.objects.using(using).update_or_create(
            queue=override.queue, group=override.group,
            defaults={"concurrency": override.concurrency,
                      "rate_limit": override.rate_limit or ""})
        transaction.on_commit(lambda: get_engine().set_group_limit(
            override.queue, override.group, rate=limits.parse_rate(override.rate_limit),
            concurrency=override.concurrency), using=using)
    logger.info("group %r of queue %r: limits concurrency=%s rate_limit=%s", group, queue,
                override.concurrency, override.rate_limit)
    return override


def clear_group_limit(queue: str, group: str) -> bool:
    """``group`` of ``queue`` back to the queue's defaults; True when it had an override."""
    queue, group = _queue(queue), option_checks.check_group(group)
    using = router.db_for_write(GroupLimit)
    with transaction.atomic(using=using):
        deleted, _ = GroupLimit.objects.using(using).filter(queue=queue, group=group).delete()
        transaction.on_commit(lambda: get_engine().clear_group_limit(queue, group), using=using)
    logger.info("group %r of queue %r: back to the queue's limits%s", group, queue,
                "" if deleted else " (had none of its own)")
    return bool(deleted)


def group_limits(queue: str) -> list[GroupOverride]:
    """The overrides of ``queue``'s groups (the rows), by group."""
    queue = _queue(queue)
    return by_queue([queue]).get(queue, [])


def by_queue(queues: Iterable[str]) -> dict[str, list[GroupOverride]]:
    """The overrides of the groups of ``queues`` (one query), by queue, each by group."""
    rows = GroupLimit.objects.filter(queue__in=list(queues)).order_by("queue", "group")
    return grouped((GroupOverride(queue=row.queue, group=row.group, concurrency=row.concurrency,
                                  rate_limit=row.rate_limit or None) for row in rows),
                   lambda override: override.queue)


def sync(engine: Engine, settings: Settings, queues: Iterable[str]) -> int:
    """Redis's group limits as the rows and the settings say, for ``queues`` (the
    reconciler's pass): the overrides that differ are written or removed, and a queue's
    limits from the settings are written when Redis holds none. Returns how many
    overrides changed. Redis is read before the rows: a call that commits meanwhile has
    its row read here, so nothing older than what Redis held is written back."""
    names = [q for q in queues if q not in settings.queue_shards]
    for queue in names:
        rate, concurrency = settings.queue_limit(queue)
        if engine.restore_queue_limit(queue, rate=rate, concurrency=concurrency,
                                      groups=limits.group_defaults(*settings.group_limit(queue))):
            logger.warning("queue %r: its limits were missing from Redis; written again "
                           "from the settings", queue)
    have = {queue: engine.group_limit_overrides(queue) for queue in names}
    rows = by_queue(names)
    wanted = {queue: {o.group: override_value(limits.parse_rate(o.rate_limit), o.concurrency)
                      for o in rows.get(queue, [])} for queue in names}
    changed = sum(engine.sync_group_limits(queue, wanted[queue], have[queue])
                  for queue in names if have[queue] != wanted[queue])
    if changed:
        logger.warning("%d group limit(s) written to Redis from the rows (Redis did not hold "
                       "them as the rows say)", changed)
    return changed


def _checked(queue: str, group: str, concurrency: object, rate_limit: object
             ) -> GroupOverride:
    queue, group = _queue(queue), option_checks.check_group(group)
    if concurrency is None and rate_limit is None:
        raise InvalidJob("set_group_limit(%r, %r) needs a concurrency, a rate_limit or both "
                         "(clear_group_limit gives the group its queue's defaults)"
                         % (queue, group))
    for name, why in (("concurrency", limits.concurrency_problem(concurrency)),
                      ("rate_limit", limits.rate_problem(rate_limit))):
        if why is not None:
            raise InvalidJob("group %r of queue %r: %s %s" % (group, queue, name, why))
    rate = limits.parse_rate(rate_limit)  # kept as rate_text writes it: "10/s", "5/10s"
    return GroupOverride(queue=queue, group=group, concurrency=cast("int | None", concurrency),
                         rate_limit=None if rate is None else limits.rate_text(rate))


def _queue(queue: str) -> str:
    s = get_settings()
    queue = limits.known_queue(queue, limits.known_queues(s.queues, s.queue_options))
    if queue in s.queue_shards:
        raise InvalidJob("queue %r is sharded: a group limit cannot be split exactly between "
                         "its shards" % (queue,))
    return queue

