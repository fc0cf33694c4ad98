"""Tick times of periodic schedules: cron expressions (``cronsim``) and intervals.

Pure functions of a definition and an instant, no database: ``next_tick(rule, after)``
is the first tick strictly after ``after``. Daylight-saving rules (docs/periodic.md):
as Debian's cron, which ``cronsim`` follows for 5-field expressions with a fixed hour:

- a fixed time in a skipped hour runs once, right after the gap;
- a fixed time in a repeated hour runs once (its first occurrence);
- a wildcard hour (``0 * * * *``, ``*/15 * * * *``) and an interval fire every real
  hour or interval through both changes.

What ``cronsim`` leaves open is filled here: asked for the tick after an instant in the
second pass of a repeated hour, it can answer the first pass (already gone) -- the answer
must be strictly later, so the search goes on from there.

Under freezegun (a project's tests), ``datetime`` is freezegun's subclass, whose
``astimezone`` drops ``fold``: the wall time 01:00 of the second pass of a repeated hour
reads as the first pass, and a wildcard-hour search never gets past the repeated hour.
``_cron_after`` therefore hands ``cronsim`` a plain ``datetime`` (``_plain``), whose
conversions keep ``fold``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django_delayq.core import validation
from django_delayq.exceptions import InvalidJob

ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
           "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
           "@hourly": "0 * * * *"}
_MAX_STEPS = 50  # strictly-later search: a repeated hour needs one or two
MAX_JITTER = 2**31 - 1  # seconds: the largest ``jitter_seconds`` every database stores
# seconds: the largest ``interval_seconds`` every database stores (about 68 years: a tick
# is then within the 100 years ``schedule(at=...)`` takes)
MAX_INTERVAL = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Rule:
    """When a schedule ticks: ``cron`` (5 fields, in ``zone``) or ``interval_s`` counted
    from ``anchor``; never before ``start`` nor after ``end``."""

    cron: str
    interval_s: int | None
    zone: ZoneInfo
    anchor: datetime
    start: datetime | None = None
    end: datetime | None = None


def expand(cron: str) -> str:
    text = " ".join(cron.split())
    return ALIASES.get(text.lower(), text)


def zone_of(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidJob("time zone must be an IANA name such as 'Europe/Berlin', not %r"
                         % (name,))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidJob("unknown time zone %r" % (name,)) from exc


def _cronsim() -> Any:
    try:
        import cronsim  # optional: the cron extra
    except ImportError as exc:  # the optional extra
        raise InvalidJob("cron schedules need the cronsim package: pip install "
                         "'django-delayq[cron]'") from exc
    return cronsim


def check_cron(cron: object) -> str:
    """The expanded expression; raises ``InvalidJob`` naming a bad one."""
    if not isinstance(cron, str) or len(expand(cron).split()) != 5:
        raise InvalidJob("cron must have 5 fields or be an alias such as @daily, not %r"
                         % (cron,))
    cronsim = _cronsim()
    try:
        cronsim.CronSim(expand(cron), datetime(2000, 1, 1, tzinfo=UTC))
    except cronsim.CronSimError as exc:
        raise InvalidJob("bad cron expression %r: %s" % (cron, exc)) from exc
    return expand(cron)


def check_rule(cron: str, interval_s: object, zone: str) -> None:
    """Exactly one of ``cron`` and ``interval_s``; raises ``InvalidJob`` naming the value."""
    if bool(cron) == (interval_s is not None):
        raise InvalidJob("a schedule needs either a cron expression or an interval, not "
                         "both or neither (cron=%r, interval=%r)" % (cron, interval_s))
    if cron:
        check_cron(cron)
    elif (isinstance(interval_s, bool) or not isinstance(interval_s, int)
          or not 1 <= interval_s <= MAX_INTERVAL):
        raise InvalidJob("interval must be a whole number of seconds from 1 to %d, not %r"
                         % (MAX_INTERVAL, interval_s))
    zone_of(zone)


def _plain(moment: datetime) -> datetime:
    """``moment`` (aware) as a plain ``datetime`` in UTC, even under freezegun."""
    u = moment.astimezone(UTC)
    # datetime's own class: freezegun replaces the name ``datetime`` (and any module
    # attribute holding the class) by its subclass, whose MRO still holds it
    plain: type[datetime] = next(c for c in datetime.__mro__ if c.__module__ == "datetime")
    return plain(u.year, u.month, u.day, u.hour, u.minute, u.second, u.microsecond,
                 tzinfo=UTC)


def _cron_after(rule: Rule, after: datetime) -> datetime:
    cronsim = _cronsim()
    at = _plain(after).astimezone(rule.zone)
    for _ in range(_MAX_STEPS):
        found: datetime = next(cronsim.CronSim(expand(rule.cron), at))
        if found.astimezone(UTC) > after:
            return found.astimezone(UTC)
        at = (found + timedelta(minutes=1)).replace(second=0, microsecond=0)
    raise InvalidJob("cron %r: no tick found after %s" % (rule.cron, after))


def _interval_tick(rule: Rule, moment: datetime, later: int = 0) -> datetime:
    """The interval tick ``later`` ticks after the latest one at or before ``moment``
    (ticks: ``anchor + n * interval``, ``n >= 0``)."""
    assert rule.interval_s is not None
    step = timedelta(seconds=rule.interval_s)
    return rule.anchor + max(0, (moment - rule.anchor) // step + later) * step


def next_tick(rule: Rule, after: datetime) -> datetime | None:
    """The first tick strictly after ``after`` (aware, UTC), ``None`` past ``end`` or past
    the year 9999 (no datetime holds it)."""
    try:
        if rule.start is not None and after < rule.start:
            after = rule.start - timedelta(microseconds=1)
        tick = _cron_after(rule, after) if rule.cron else _interval_tick(rule, after, 1)
    except OverflowError:
        return None
    return None if rule.end is not None and tick > rule.end else tick


def _cron_before(rule: Rule, until: datetime) -> datetime | None:
    """The latest cron tick at or before ``until``: ``cronsim`` steps back two ticks from
    it (its reverse iteration, however far back they are), and the walk forward from there
    (``_cron_after``, the ticks ``next_tick`` gives) confirms the latest one."""
    back = _cronsim().CronSim(expand(rule.cron), _plain(until).astimezone(rule.zone), reverse=True)
    probe = (next(back), next(back))[1].astimezone(UTC) - timedelta(microseconds=1)
    found = None
    tick = _cron_after(rule, probe)
    for _ in range(_MAX_STEPS):
        if tick > until:
            break
        found, tick = tick, _cron_after(rule, tick)
    return found


def last_tick(rule: Rule, after: datetime, until: datetime) -> datetime | None:
    """The latest tick in ``(after, until]``, ``None`` if there is none. However far
    behind ``until`` is, a few steps: an interval's is computed, a cron's found stepping
    back from ``until`` (``_cron_before``); the missed ticks are never walked one by one."""
    if rule.end is not None and until > rule.end:
        until = rule.end
    try:
        if rule.interval_s is None:
            found = _cron_before(rule, until)
        else:  # none before the anchor
            found = _interval_tick(rule, until) if until >= rule.anchor else None
    except (OverflowError, StopIteration):  # no tick before year 1
        found = None
    before_start = found is not None and rule.start is not None and found < rule.start
    return None if found is None or found <= after or before_start else found


def check_start(start: datetime | None, now: datetime) -> None:
    """``InvalidJob`` for a start more than 100 years after ``now``: its first tick could
    not be a job's due time (``schedule(at=...)`` takes at most that)."""
    if start is not None and start - now > timedelta(seconds=validation.MAX_DELAY_SECONDS):
        raise InvalidJob("start %s is more than 100 years from now: no tick of it could be "
                         "scheduled" % start.isoformat())
