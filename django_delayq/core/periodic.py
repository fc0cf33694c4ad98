"""Periodic schedules, materialised one tick at a time as ordinary keyed jobs.

The job of tick T of schedule S has the idempotency key ``delayq.tick:S:V:T`` (V: the
schedule's version, bumped by every edit), so creating it twice is a no-op: whoever
creates it -- the worker that starts the previous tick's job (``tick_started``) or any
worker's keeper pass (``keep``) -- the tick has one job, and a job runs once. No
singleton: every worker may do both, the key decides. docs/periodic.md.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import router, transaction
from django.db.models import Q
from django.utils import timezone

from django_delayq.core import (
    api,
    conf,
    option_checks,
    options,
    registry,
    schedules,
    tick_presence,
    validation,
)
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine.logtext import shown
from django_delayq.engine.outcomes import CancelOutcome
from django_delayq.exceptions import DelayQError, InvalidJob
from django_delayq.models import (
    TICK_KEY_PREFIX,
    Job,
    JobStatus,
    MissedPolicy,
    Schedule,
    aware_datetime,
    db_datetime,
)

logger = logging.getLogger(__name__)

MISSED_GRACE = timedelta(seconds=5)  # a tick later than this (or half its period) is missed
STALLED = timedelta(seconds=1)  # a next tick this far past whose job has not started
STALLED_EVERY_S = 1.0  # how often the keeper looks for such schedules


def check(s: Schedule) -> None:
    """Raises ``InvalidJob`` naming the bad value of a definition (the admin form,
    ``manage.py check``)."""
    registry.check_schedulable(s.callable_path)
    schedules.check_rule(s.cron, s.interval_seconds, s.time_zone)
    start = s.start_at  # naive from a form under USE_TZ = False: the local time
    schedules.check_start(timezone.make_aware(start) if start and timezone.is_naive(start)
                          else start, datetime.now(UTC))
    if not isinstance(s.args, list) or not isinstance(s.kwargs, dict):
        raise InvalidJob("args must be a JSON list and kwargs a JSON object, not %r, %r"
                         % (s.args, s.kwargs))
    validation.check_json(s.args, s.kwargs)
    job_options(s).check(s.callable_path)
    options.check_arguments(s.callable_path, s.args, s.kwargs)
    if s.start_at and s.end_at and s.end_at <= s.start_at:
        raise InvalidJob("end %s is not after start %s" % (s.end_at, s.start_at))


def job_options(s: Schedule) -> options.JobOptions:
    """The options of a schedule's jobs: its fields named like an option (its queue,
    priority, group and atomic); one at its default (empty, 0, False) leaves the option
    unset: the default queue, priority 0, no group, the function's own ``atomic``."""
    given: dict[str, Any] = {name: getattr(s, name) or None
                             for name in option_checks.SCHEDULES}
    return options.JobOptions(**given)


def schedule_of_key(key: str | None) -> int | None:
    """The schedule id a tick job's key names (``None``: not a tick job)."""
    return (int(key[len(TICK_KEY_PREFIX):].split(":", 1)[0])
            if key and key.startswith(TICK_KEY_PREFIX) else None)


def tick_of_key(key: str | None) -> datetime | None:
    """The tick time a tick job's key names (its due time may be later: jitter, catch-up)."""
    return (datetime.fromtimestamp(int(key.rsplit(":", 1)[1]) / 1000, tz=UTC)
            if key is not None and schedule_of_key(key) is not None else None)


def _choose(rule: schedules.Rule, after: datetime, now: datetime, catch_up: bool
            ) -> datetime | None:
    """The tick to materialise after ``after``: the next one, unless it is missed (due
    before ``now`` by more than the grace): then, with ``catch_up``, the latest missed
    tick, else the next one after ``now``."""
    tick = schedules.next_tick(rule, after)
    if tick is None:
        return None
    following = schedules.next_tick(rule, tick)
    grace = min(MISSED_GRACE, (following - tick) / 2) if following else MISSED_GRACE
    if tick >= now - grace:
        return tick
    return schedules.last_tick(rule, after, now) if catch_up else schedules.next_tick(rule, now)


def materialise(s: Schedule, tick: datetime, now: datetime) -> str:
    """Create (or find: same key) the job of ``tick``; returns its id."""
    due = max(tick + timedelta(seconds=random.uniform(0, s.jitter_seconds)), now)  # 0: none
    key = "%s%d:%d:%d" % (TICK_KEY_PREFIX, s.pk, s.version, validation.at_ms(tick))
    spec = options.JobSpec(args=list(s.args or []), kwargs=dict(s.kwargs or {}), at=due,
                           key=key).under(job_options(s))
    return api.schedule_spec(s.callable_path, spec).id


def advance(s: Schedule, after: datetime, now: datetime | None = None,
            catch_up: bool = False) -> str | None:
    """Materialise the tick after ``after`` and point the schedule at it (only if nobody
    moved the schedule meanwhile). Missed ticks are skipped unless ``catch_up`` (the lost
    job of a ``once`` schedule). Returns the job id, ``None`` past the end."""
    if not s.enabled:
        return None
    # aware: a row's times are naive under USE_TZ = False (the wall time of TIME_ZONE), the
    # rule's ticks aware; written back through ``db_datetime``
    now, after = aware_datetime(now or timezone.now()), aware_datetime(after)
    start, end = (None if t is None else aware_datetime(t) for t in (s.start_at, s.end_at))
    rule = schedules.Rule(cron=s.cron, interval_s=s.interval_seconds,
                          zone=schedules.zone_of(s.time_zone),
                          anchor=start or aware_datetime(s.created_at), start=start, end=end)
    tick = _choose(rule, after, now, catch_up)
    if tick is None:
        return None
    job_id = _point(s, tick, now)
    if not Schedule.objects.filter(pk=s.pk, version=s.version, enabled=True).exists():
        api.cancel(job_id)  # edited or disabled meanwhile: this version's tick must not run
        return None
    return job_id


def _point(s: Schedule, tick: datetime, now: datetime) -> str:
    """Create ``tick``'s job and point the schedule at it (forward only) in one
    transaction. The job is sent to Redis at the commit: a worker may start it at once,
    and ``tick_started`` must then find it named as the next tick, or nobody creates the
    tick after it until a keeper pass does."""
    with transaction.atomic(using=router.db_for_write(Job)), \
            transaction.atomic(using=router.db_for_write(Schedule)):
        job_id = materialise(s, tick, now)
        stored = db_datetime(tick)
        later = Q(next_tick_at__isnull=True) | Q(next_tick_at__lt=stored)
        Schedule.objects.filter(later, pk=s.pk, version=s.version).update(
            next_tick_at=stored, next_job_id=job_id)
    return job_id


def tick_started(job_id: str, now: datetime | None = None) -> None:
    """A worker started ``job_id``, a tick's job (``Settler.on_start``: its row's key names a
    schedule, ``Envelope.tick``): if it is its schedule's current tick, create the next
    tick's job now (the keeper pass would, a little later). Never raises."""
    try:
        s = Schedule.objects.filter(next_job_id=job_id).first()
        # its send may fail (Redis unreachable): the keeper thread looks
        if s is not None and (created := _consumed(s, now)):
            tick_presence.watch([created])
    except Exception:  # noqa: BLE001 - the keeper pass covers it
        logger.exception("schedule: could not create the tick after job %s", shown(job_id))


def keep(s: Schedule, now: datetime | None = None, own: str | None = None,
         judge: bool = True) -> str | None:
    """Make sure enabled ``s`` has its next tick's job (new schedule, a lost or consumed
    tick job, downtime under the missed-run policy). Returns the pending job's id.

    A tick job still pending after its due time while no worker ran (``missed``): ``skip``
    cancels it and materialises the next future tick; ``once`` lets it run (late, once)
    -- the tick after it is then the next future one. ``own``: the id of the worker whose
    keeper pass this is, once the registry holds it (``Keeper.own``); ``judge``: whether
    to judge a late tick missed (the full pass does; the keeper's every-second pass leaves
    it to it, as each judgement reads the whole workers registry)."""
    now = now or timezone.now()
    if not s.enabled:
        return None
    Keeper.active = True
    if s.next_job_id and s.next_tick_at is not None:
        row = Job.objects.filter(pk=s.next_job_id).values_list("status", "run_at",
                                                               "queue").first()
        if row is not None and row[0] in (JobStatus.SCHEDULED, JobStatus.RETRYING):
            if (judge and s.missed == MissedPolicy.SKIP and missed(row[2], row[1], now, own)
                    and cancel_pending(s)):
                return advance(s, now, now)  # it was due while no worker ran
            return s.next_job_id  # pending: nothing to do
        if row is not None:  # started or finished: that tick is consumed
            return _consumed(s, now)
        # lost (no row): the same tick again, or as the missed-run policy says
        return advance(s, s.next_tick_at - timedelta(microseconds=1), now,
                       catch_up=s.missed == MissedPolicy.ONCE)
    after = now - timedelta(microseconds=1)  # new or edited: a tick due right now counts
    return advance(s, max(after, s.last_tick_at or after), now)


def _consumed(s: Schedule, now: datetime | None) -> str | None:
    """The next tick's job of ``s`` started (or ended): it is the last tick now, and the
    tick after it is created (``advance``)."""
    if s.next_tick_at is None:
        return None
    Schedule.objects.filter(pk=s.pk, next_job_id=s.next_job_id).update(
        last_tick_at=s.next_tick_at, last_job_id=s.next_job_id)
    return advance(s, s.next_tick_at, now)


def missed(queue: str, due: datetime, now: datetime, own: str | None = None) -> bool:
    """Whether a tick job of ``queue`` due at ``due`` (its tick plus jitter) and not
    started by ``now`` was missed because no worker ran: it is late by more than
    ``MISSED_GRACE``, and no live worker serving ``queue`` has been running since before
    it was due (one that has is merely busy: the job runs, late). A worker's first
    keeper pass runs before its first claim, so a worker starting after a downtime
    cancels what was missed before it could claim it. ``own``: the id of the worker
    asking (see ``_served_since``)."""
    if timezone.is_naive(due):  # USE_TZ = False: the database's local time
        due, now = timezone.make_aware(due), (timezone.make_aware(now)
                                              if timezone.is_naive(now) else now)
    return due < now - MISSED_GRACE and not _served_since(queue, due, own)


# A worker's entry of the workers registry, what ``missed`` needs of it: when it started,
# the queues it serves.
Registered = tuple[datetime, tuple[str, ...]]


def _served_since(queue: str, moment: datetime, own: str | None = None) -> bool:
    """A worker heard from within two leases serves ``queue`` and started before
    ``moment`` (the workers registry; its info as each worker writes it). When the
    registry lacks ``own`` (the asking worker, alive, whose heartbeat wrote it before),
    Redis lost the registry (a wipe, a restart without persistence) and the live workers
    are not all back in it yet: it cannot tell, so the tick is not judged missed now (a
    later pass judges it once they are)."""
    live = _live_workers()
    return (own is not None and own not in live) or any(
        queue in queues and started <= moment for started, queues in live.values())


def _live_workers() -> dict[str, Registered]:
    """The workers heard from within two leases, by id (entries no worker of this version
    wrote are left out)."""
    engine = get_engine()
    alive_ms = engine.time_ms() - 2 * get_settings().lease_ms
    return {entry.id: w for entry in engine.workers()
            if entry.beat_ms >= alive_ms and (w := _entry(entry.info))}


def _entry(raw: str | None) -> Registered | None:
    try:
        info = json.loads(raw or "")
        started = datetime.fromisoformat(info["started"])
        queues = tuple(str(q) for q in info["queues"])
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return started if started.tzinfo else started.replace(tzinfo=UTC), queues


def keep_all(now: datetime | None = None, own: str | None = None,
             schedules: list[Schedule] | None = None, judge: bool = True) -> int:
    """One keeper pass over the enabled schedules (or over ``schedules``); returns how
    many failed. Their pending tick jobs are then looked for in Redis, and put back where
    a failed send or a data loss left only the row (``tick_presence``; what Redis could
    not answer is looked at again by the keeper thread every half second)."""
    failed = 0
    pending = []
    for s in Schedule.objects.filter(enabled=True) if schedules is None else schedules:
        try:
            pending.append(keep(s, now, own, judge))
        except Exception as exc:  # noqa: BLE001 - one bad schedule never stops the others
            failed += 1
            logger.warning("schedule %r: %s", s.name, shown(exc))
    tick_presence.watch(job_id for job_id in pending if job_id)
    tick_presence.confirm(force=True)
    return failed


def cancel_pending(s: Schedule) -> bool:
    """Cancel the materialised future tick's job (a deleted or replaced schedule, a missed
    tick); whether it was cancelled."""
    try:
        return bool(s.next_job_id) and api.cancel(s.next_job_id) == CancelOutcome.CANCELLED
    except DelayQError as exc:
        logger.info("schedule %r: tick job %s: %s", s.name, shown(s.next_job_id), shown(exc))
        return False


def replace(s: Schedule, values: dict[str, Any] | None = None) -> bool:
    """After an edit (or to apply ``values``): a new version, the materialised future
    tick's job cancelled; the next tick is created from the new definition (none when
    disabled). Only one of racing callers bumps version ``s.version``: the others return
    False. A job a racer creates for the old version is cancelled by ``advance``. Values
    of the definition (any field but ``enabled``) over ``s`` (the version updated) are
    checked first, as by the admin form (``check``): ``InvalidJob``, nothing written."""
    if set(values or {}) - {"enabled"}:
        probe = copy.copy(s)
        vars(probe).update(values or {})  # the fields' values (no relation among them)
        check(probe)
    return _replace(s, values)


def _replace(s: Schedule, values: dict[str, Any] | None = None) -> bool:
    """``replace`` unchecked (``sync_settings`` checked its definitions)."""
    with transaction.atomic():
        row = Schedule.objects.select_for_update().filter(pk=s.pk, version=s.version).first()
        bumped = row is not None and Schedule.objects.filter(
            pk=s.pk, version=s.version).update(
                **(values or {}), version=s.version + 1, next_job_id="", next_tick_at=None,
                updated_at=timezone.now()) == 1
    if row is not None and bumped:
        cancel_pending(row)
    s.refresh_from_db()
    keep(s)
    return bumped


def sync_settings(definitions: dict[str, dict[str, Any]]) -> int:
    """Upsert ``DELAYQ["SCHEDULES"]`` as rows marked ``from_settings``; a changed definition
    is replaced (``enabled`` stays as operators set it); rows gone from settings are
    disabled with a warning (docs/periodic.md: a rolling deploy). A definition that cannot
    be stored (its problems, or the database's refusal) is skipped with a warning naming
    it, its row left as it was: it never stops the others. Returns how many were skipped."""
    failed = 0
    for name, d in definitions.items():
        try:
            _sync_one(name, d)
        except Exception as exc:  # noqa: BLE001 - one bad definition never stops the others
            failed += 1
            logger.warning("schedule %r from DELAYQ['SCHEDULES'] not synced: %s", name, shown(exc))
    gone = Schedule.objects.filter(from_settings=True, enabled=True).exclude(
        name__in=list(definitions))
    for s in gone:
        if _replace(s, {"enabled": False}):
            logger.warning("schedule %r disabled: not in this process's DELAYQ['SCHEDULES'] "
                           "(removed from them, or this worker's settings are older than "
                           "those that added it: then enable it again)", s.name)
    return failed


def _sync_one(name: str, d: dict[str, Any]) -> None:
    """Upsert one definition (``sync_settings``); ``InvalidJob`` naming its problems."""
    if problems := conf.settings_problems({name: d}):
        raise InvalidJob("; ".join(problems))
    values: dict[str, Any] = {  # its start and end (aware) as the row stores them
        f: db_datetime(v) if isinstance(v, datetime) else v
        for f, v in conf.settings_values(d).items()}
    enabled = values.pop("enabled")  # as operators set it, once the row exists
    s, created = Schedule.objects.get_or_create(
        name=name, defaults={**values, "from_settings": True, "enabled": enabled})
    changed = [f for f, v in values.items() if getattr(s, f) != v]
    if not created and (changed or not s.from_settings):
        _replace(s, {**values, "from_settings": True})


def sync_from_settings() -> int:
    return sync_settings(get_settings().schedules or {})


class Keeper:
    """The keeper pass of one worker: ``keep_all`` at most every ``every_s`` seconds, and
    every ``STALLED_EVERY_S`` over the schedules whose next tick is overdue."""

    active = False  # some schedule is enabled (set by the last pass): the stalled pass runs

    def __init__(self, every_s: float = 10.0, worker_id: str | None = None) -> None:
        self.every_s = every_s
        self._last: float | None = None
        self._last_stalled = -1e18
        self._synced = False  # DELAYQ["SCHEDULES"] synced (retried each pass until it is)
        self.worker_id = worker_id  # the worker whose keeper this is (None: none)
        self.own: str | None = None  # its id, once read back from the workers registry

    def tick(self, first: Callable[[], None] | None = None) -> None:
        """Runs ``first`` (the worker's retention pass, on the same keeper thread), then
        looks for the watched tick jobs in Redis (``tick_presence.confirm``), then, at
        most every ``every_s``, the schedules pass, and in between the pass over stalled
        schedules. Never raises (``first`` must not either). The first pass syncs
        ``DELAYQ["SCHEDULES"]`` (worker start)."""
        if first is not None:
            first()
        tick_presence.confirm()  # tick jobs whose send may have failed, every half second
        now_s = time.monotonic()
        if self._last is not None and now_s - self._last < self.every_s:
            self._stalled(now_s)
            return
        self._learn_own()
        self._last = now_s
        try:
            if not self._synced:  # a skipped definition (a racing worker's unique-name
                self._synced = sync_from_settings() == 0  # clash) retries next pass
            Keeper.active = Schedule.objects.filter(enabled=True).exists()
            if Keeper.active:
                keep_all(own=self.own)
        except Exception as exc:  # noqa: BLE001 - never let the keeper thread die
            logger.warning("schedules keeper pass failed: %s", shown(exc))

    def _stalled(self, now_s: float) -> None:
        """Keep the schedules whose next tick is over ``STALLED`` past: its job was lost
        with Redis's data, or the worker that started the tick before it died before
        creating it. The full pass every ``every_s`` would find them too, but a tick
        schedule of seconds must be back within a few."""
        if not Keeper.active or now_s - self._last_stalled < STALLED_EVERY_S:
            return
        self._last_stalled = now_s
        self._learn_own()
        try:
            overdue = list(Schedule.objects.filter(enabled=True,
                                                   next_tick_at__lt=timezone.now() - STALLED))
            if overdue:
                keep_all(own=self.own, schedules=overdue, judge=False)
        except Exception as exc:  # noqa: BLE001 - the full pass reports a lasting failure
            logger.debug("schedules: the pass over stalled schedules failed: %s", shown(exc))

    def _learn_own(self) -> None:
        """Look for this worker in the registry until found (from the pass after its first
        heartbeat on): ``missed`` then knows the registry lost it when it is gone."""
        if self.own is None and self._last is not None and self.worker_id is not None:
            try:
                self.own = self.worker_id if self.worker_id in _live_workers() else None
            except Exception as exc:  # noqa: BLE001 - Redis down: read at the next pass
                logger.debug("schedules: the workers registry could not be read: %s", shown(exc))


def status_rows() -> list[dict[str, Any]]:
    """The schedules and their next tick (none for a disabled one), for ``delayq_status``
    (``DatabaseError`` if the database cannot be read: unknown, not none)."""
    return [{"name": s.name, "enabled": s.enabled, "rule": s.cron or "every %ss"
             % s.interval_seconds, "time_zone": s.time_zone,
             "next_tick": s.next_tick_at.isoformat() if s.enabled and s.next_tick_at else None,
             "next_job": s.next_job_id or None} for s in Schedule.objects.all()]


def status_lines(rows: list[dict[str, Any]]) -> list[str]:
    """``delayq_status``'s text; each control character escaped, as in a worker's id."""
    return ["", "SCHEDULES (%d)" % len(rows)] + [
        "  %-24s %-8s %-16s %-16s next tick %s" % (
            shown(r["name"], sys.maxsize), "enabled" if r["enabled"] else "disabled",
            shown(r["rule"], sys.maxsize), shown(r["time_zone"], sys.maxsize),
            r["next_tick"] or "-")
        for r in rows]
