"""Schedule-time checks of job arguments: errors name the bad value and its place."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from typing import Any

from django_delayq.exceptions import InvalidJob

MAX_DEPTH = 100  # deeper than this is a mistake (or a circular structure)


def find_bad(value: Any, where: str, depth: int = 0) -> str | None:
    """What in ``value`` is not JSON, named with its place (``where``), or None."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "%s = %r (not finite)" % (where, value)
    if depth >= MAX_DEPTH and isinstance(value, (list, tuple, dict)):
        return "%s is nested more than %d levels deep (circular?)" % (where[:120], MAX_DEPTH)
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if bad := find_bad(item, "%s[%d]" % (where, i), depth + 1):
                return bad
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return "%s has the key %r (%s); JSON keys must be strings" % (
                    where, key, type(key).__name__)
            if bad := find_bad(item, "%s[%r]" % (where, key), depth + 1):
                return bad
        return None
    return "%s = %r (%s)" % (where, value, type(value).__name__)


def not_json(bad: str) -> InvalidJob:
    """The error for a value that is not JSON; ``bad`` names it and its place."""
    return InvalidJob("job arguments must be JSON (str, int, float, bool, None, list, dict); "
                      "%s is not. Pass an id or a plain value instead." % bad)


def check_json(args: Any, kwargs: dict[str, Any]) -> None:
    for value, name in ((args, "args"), (kwargs, "kwargs")):
        if bad := find_bad(value, name):
            raise not_json(bad)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_args(args: list[Any], kwargs: dict[str, Any]) -> tuple[str, str]:
    """``check_json`` + ``dumps`` of both, at the C encoder's speed when the values are
    plain: the walk that names a bad value runs only when encoding fails, or when a dict
    is involved (``json.dumps`` would quietly turn non-string keys into strings)."""
    try:
        args_json = dumps(args)
        kwargs_json = dumps(kwargs) if kwargs else "{}"
    except (TypeError, ValueError) as exc:
        check_json(args, kwargs)
        raise InvalidJob("job arguments must be JSON: %s" % exc) from None
    if kwargs or "{" in args_json:
        check_json(args, kwargs)
    return args_json, kwargs_json


def delay_seconds(delay: Any) -> float:
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, (int, float)) and not isinstance(delay, bool):
        seconds = float(delay)
    else:
        raise InvalidJob("delay must be seconds (int/float) or a timedelta, not %r" % (delay,))
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidJob("delay must be >= 0, got %r" % (delay,))
    return seconds


def check_at(at: Any, use_tz: bool) -> datetime:
    if not isinstance(at, datetime):
        raise InvalidJob("at must be a datetime, not %r" % (at,))
    if use_tz and (at.tzinfo is None or at.utcoffset() is None):
        raise InvalidJob(
            "at=%s is a naive datetime while USE_TZ=True; pass an aware one "
            "(django.utils.timezone.make_aware or datetime(..., tzinfo=...))" % at.isoformat()
        )
    return at


def check_max_attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidJob("max_attempts must be an integer >= 1, got %r" % (value,))
    return value
