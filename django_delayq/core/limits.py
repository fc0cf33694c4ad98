"""``DELAYQ["QUEUE_OPTIONS"]`` and ``DELAYQ["CALLABLE_LIMITS"]``: parsed and checked.

::

    "QUEUE_OPTIONS": {"payments": {"timeout": 30, "rate_limit": "100/m", "concurrency": 5,
                                   "group_rate_limit": "10/m", "group_concurrency": 2}},
    "CALLABLE_LIMITS": {"shop.tasks.call_api": {"rate_limit": "10/s", "concurrency": 2}},

Every key of an entry is optional. A rate is ``"N/<unit>"``: at most N per unit (a
queue's claims, a callable's starts) (``s``, ``m``, ``h``), the unit optionally with a
whole multiplier (``"5/10s"``, ``"100/15m"``); N >= 1. ``concurrency`` is an integer
>= 1: at most that many running at once.
``timeout`` (queues only) is seconds > 0, at most a year: the time limit of an attempt of
that queue's jobs that set none. ``group_rate_limit`` and ``group_concurrency`` (queues
only) are the same for each group of the queue (docs/groups.md, "Limits"): every group's
default, which an override of one group replaces (``core/group_limits.py``). Each problem
is a message naming the key and the value; ``conf`` reports them (``manage.py check``,
``ImproperlyConfigured``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django_delayq.core.validation import (
    QUEUE_NAME_RULE,
    name_problem,
    not_a_queue_name,
    too_long_int,
)
from django_delayq.engine import backoff
from django_delayq.engine.outcomes import QueueLimit
from django_delayq.engine.shard_map import MAX_SHARDS, SHARD_MARK
from django_delayq.exceptions import InvalidJob

Rate = tuple[int, int]  # (starts, per_ms)

UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000}
_RATE = re.compile(r"\s*(\d+)\s*/\s*(\d*)\s*([smh])\s*")
QUEUE_KEYS = ("timeout", "rate_limit", "concurrency", "group_rate_limit", "group_concurrency",
              "shards")
# the keys a sharded queue refuses: each shard's claim.lua would count its own
LIMIT_KEYS = ("rate_limit", "concurrency", "group_rate_limit", "group_concurrency")
CALLABLE_KEYS = ("rate_limit", "concurrency")
MAX_RATE_MS = 7 * 24 * 3_600_000  # a window of at most a week
MAX_COUNT = 2**31 - 1  # a concurrency or a rate's N: what GroupLimit's column holds anywhere
MAX_SECONDS = backoff.MAX_SECONDS  # any duration a setting gives: a year, as a retry's wait
MAX_DAYS = 100 * 365  # the longest retention: a cutoff that far back is a date anywhere
BOUND_NAMES = {MAX_SECONDS: "%d (a year)" % MAX_SECONDS, MAX_DAYS: "%d (100 years)" % MAX_DAYS}


def number_problem(value: object, most: int, *, integer: bool = False,
                   kind: str | None = None) -> str | None:
    """Why ``value`` is not a number (``integer``: an int), never a bool, > 0 and at most
    ``most`` (NaN and the infinities are not), naming it as ``kind``; None when it is."""
    kind = kind or ("an integer" if integer else "a number")
    if type(value) is int and too_long_int(value) is not None:  # %r of it would raise
        return "must be %s > 0, at most %s, not an integer of %d bits" % (
            kind, BOUND_NAMES.get(most, most), value.bit_length())
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) \
            or value <= 0:
        return "must be %s > 0, not %r" % (kind, value)
    if not value <= most:  # NaN too
        return "must be %s > 0, at most %s, not %r" % (kind, BOUND_NAMES.get(most, most), value)
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Limit:
    """A parsed entry: ``rate`` (starts, per_ms), ``concurrency``; ``timeout`` and each
    group's defaults ``group_rate``, ``group_concurrency`` and ``shards`` (queues)."""

    rate: Rate | None = None
    concurrency: int | None = None
    timeout: float | None = None
    group_rate: Rate | None = None
    group_concurrency: int | None = None
    shards: int = 1


def parse_rate(text: object) -> Rate | None:
    """``"10/s"`` -> ``(10, 1000)``, ``"5/10s"`` -> ``(5, 10000)``; ``None`` when invalid."""
    match = _RATE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return None
    count, multiplier, unit = int(match[1]), int(match[2] or 1), match[3]
    per_ms = multiplier * UNIT_MS[unit]
    valid = 1 <= count <= MAX_COUNT and multiplier >= 1 and per_ms <= MAX_RATE_MS
    return (count, per_ms) if valid else None


UNIT_NAMES = {ms: unit for unit, ms in UNIT_MS.items()}


def rate_text(rate: Rate | None) -> str:
    """``(10, 1000)`` -> ``"10/s"``, ``(5, 10000)`` -> ``"5/10s"``; ``"-"`` for none."""
    if rate is None:
        return "-"
    count, per_ms = rate
    for ms in sorted(UNIT_NAMES, reverse=True):
        if per_ms % ms == 0:
            multiple = per_ms // ms
            return "%d/%s%s" % (count, "" if multiple == 1 else multiple, UNIT_NAMES[ms])
    return "%d/%dms" % (count, per_ms)


def rate_problem(rate: object) -> str | None:
    """Why ``rate`` (None: no limit) is not a rate, naming it; None when it is fine."""
    if rate is None or parse_rate(rate) is not None:
        return None
    return ("must be a rate such as '10/s', '100/m', '5/10s' or '1000/h' (N >= 1, at most "
            "%d; at most a week per window), not %r" % (MAX_COUNT, rate))


def concurrency_problem(concurrency: object) -> str | None:
    """Why ``concurrency`` (None: no limit) is not one, naming it; None when it is fine."""
    if concurrency is None or (isinstance(concurrency, int) and not isinstance(concurrency, bool)
                               and 1 <= concurrency <= MAX_COUNT):
        return None
    if isinstance(concurrency, int) and concurrency > MAX_COUNT:
        return "must be an integer >= 1, at most %d, not %r" % (MAX_COUNT, concurrency)
    return "must be an integer >= 1, not %r" % (concurrency,)


def _entry_problems(where: str, entry: object, keys: Sequence[str]) -> list[str]:
    if not isinstance(entry, dict):
        return ["%s must be a dict with keys among %s, not %r" % (where, ", ".join(keys), entry)]
    found = ["%s has an unknown key %r (known: %s)" % (where, key, ", ".join(keys))
             for key in entry if key not in keys]
    checks = (("rate_limit", rate_problem), ("group_rate_limit", rate_problem),
              ("concurrency", concurrency_problem), ("group_concurrency", concurrency_problem))
    found += ["%s[%r] %s" % (where, key, why) for key, check in checks
              if key in keys and (why := check(entry.get(key))) is not None]
    timeout = entry.get("timeout")
    if timeout is not None and (why := number_problem(timeout, MAX_SECONDS,
                                                      kind="a number of seconds")):
        found.append("%s['timeout'] %s" % (where, why))
    return found


def queue_options_problems(value: object, queues: object = ()) -> list[str]:
    """QUEUE_OPTIONS: a dict of queue name -> options (any queue name: a queue served
    through the Tasks backend need not be in QUEUES; ``checks`` warns about the others).
    A shard count is an integer 1..MAX_SHARDS, on a queue without limits (a limit cannot
    be split exactly between shards), whose shard names (``queue#1`` ...) are no other
    queue's name (of ``queues``, DELAYQ["QUEUES"], or of QUEUE_OPTIONS)."""
    if not isinstance(value, dict):
        return ["DELAYQ['QUEUE_OPTIONS'] must be a dict of queue name -> options such as "
                "{'payments': {'timeout': 30, 'rate_limit': '100/m', 'concurrency': 5}}, "
                "not %r" % (value,)]
    names = set(queues) if isinstance(queues, (list, tuple)) else set()
    names |= {q for q in value if isinstance(q, str)}
    found: list[str] = []
    for queue, entry in value.items():
        where = "DELAYQ['QUEUE_OPTIONS'][%r]" % (queue,)
        if not_a_queue_name(queue):
            found.append("%s: not a queue name: %s" % (where, QUEUE_NAME_RULE))
            continue
        found += _entry_problems(where, entry, QUEUE_KEYS)
        count = entry.get("shards", 1) if isinstance(entry, dict) else 1
        where += "['shards']"
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SHARDS:
            found.append("%s must be an integer from 1 to %d, not %r" % (where, MAX_SHARDS, count))
        elif count > 1 and any(entry.get(k) for k in LIMIT_KEYS):
            found.append("%s is %d: a sharded queue takes no rate_limit or concurrency, nor "
                         "group limits (each shard would enforce its own; given: %s); remove "
                         "the limit or the shards" % (where, count, ", ".join(
                             "%s=%r" % (k, entry[k]) for k in LIMIT_KEYS if entry.get(k))))
        elif count > 1 and (taken := sorted(n for n in names if isinstance(n, str)
                                            and n.startswith("%s%s" % (queue, SHARD_MARK)))):
            found.append("%s is %d: the shards of %r are named %r#1... and would share keys "
                         "with queue %r; rename that queue" % (where, count, queue, queue,
                                                               taken[0]))
    return found


def callable_limits_problems(value: object, allowed: object) -> list[str]:
    """CALLABLE_LIMITS: a dict of job path -> limits; each path in an allowed module."""
    if not isinstance(value, dict):
        return ["DELAYQ['CALLABLE_LIMITS'] must be a dict of job path -> limits such as "
                "{'shop.tasks.call_api': {'rate_limit': '10/s', 'concurrency': 2}}, not %r"
                % (value,)]
    modules = set(allowed) if isinstance(allowed, (list, tuple)) else set()
    found: list[str] = []
    for path, entry in value.items():
        where = "DELAYQ['CALLABLE_LIMITS'][%r]" % (path,)
        why = name_problem(path, what="dotted path")
        if why or "." not in path:
            found.append("%s: not a job path such as 'shop.tasks.call_api' (%s)"
                         % (where, why or "no module part"))
        elif (module := path.rpartition(".")[0]) not in modules:
            found.append("%s: module %r is not in DELAYQ['ALLOWED_CALLABLES'] %r: no such job "
                         "can run" % (where, module, sorted(modules)))
        elif isinstance(entry, dict) and not entry:
            found.append("%s is empty: give a rate_limit, a concurrency or both" % where)
        else:
            found += _entry_problems(where, entry, CALLABLE_KEYS)
    return found


def parse_all(value: dict[str, Any]) -> dict[str, Limit]:
    """The entries (that passed the checks above), parsed."""
    return {name: Limit(rate=parse_rate(e.get("rate_limit")), concurrency=e.get("concurrency"),
                        timeout=None if e.get("timeout") is None else float(e["timeout"]),
                        group_rate=parse_rate(e.get("group_rate_limit")),
                        group_concurrency=e.get("group_concurrency"), shards=e.get("shards", 1))
            for name, e in value.items()}


def group_defaults(rate: Rate | None, concurrency: int | None) -> QueueLimit | None:
    """Every group's limits in a queue by default (``Settings.group_limit``), None when
    none."""
    return None if rate is None and concurrency is None else QueueLimit(
        rate=rate, concurrency=concurrency)


def known_queues(queues: Sequence[str], options: dict[str, Limit]) -> tuple[str, ...]:
    """The queues the settings name: ``QUEUES``, then ``QUEUE_OPTIONS``' others."""
    return tuple(dict.fromkeys([*queues, *options]))


def known_queue(queue: str, known: tuple[str, ...]) -> str:
    """``queue`` when ``known`` (``known_queues``) holds it, else an ``InvalidJob``."""
    if queue not in known:
        raise InvalidJob("unknown queue %r; the queues are %r (DELAYQ['QUEUES'] and "
                         "DELAYQ['QUEUE_OPTIONS'])" % (queue, list(known)))
    return queue
