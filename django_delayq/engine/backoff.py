"""Retry delays: pure functions from (policy, attempt) to milliseconds.

A policy is plain JSON so it can ride in the envelope:

* a number ``s``                      fixed: ``s`` seconds between attempts
* a list ``[15, 180, 600]``           explicit: the n-th retry waits the n-th value
                                      (the last one repeats)
* ``{"base": 5, "factor": 2, "max": 3600, "jitter": true}``
                                      exponential: ``base * factor**(n-1)`` capped at
                                      ``max``, with full jitter in [50 %, 100 %]

Every number is bounded (``validate``): seconds are finite, ``>= 0`` and at most
``MAX_SECONDS`` (a year) per step, a list holds 1 to ``MAX_STEPS`` delays, a factor is at
most ``MAX_FACTOR``. ``delay_ms`` refuses (``ValueError``) any policy ``validate``
refuses, so a policy read from anywhere can never make it overflow.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

# A backoff policy: seconds, a list of seconds (one per retry), or an exponential's
# {"base", "factor", "max", "jitter"}; None: DEFAULT_POLICY. ``validate`` checks one.
Policy = float | Sequence[float] | Mapping[str, Any] | None

DEFAULT_POLICY: dict[str, Any] = {"base": 5, "factor": 2, "max": 3600, "jitter": True}
MAX_SECONDS = 365 * 24 * 3600  # one retry never waits more than a year
MAX_STEPS = 999  # an explicit list: one delay per retry of at most 1,000 attempts
MAX_FACTOR = 1000
_KEYS = ("base", "factor", "max", "jitter")


def delay_ms(policy: Policy, retry_number: int, rng: random.Random | None = None) -> int:
    """Milliseconds to wait before retry ``retry_number`` (1 = first retry); at most
    ``MAX_SECONDS`` s. ``ValueError`` naming the problem when ``policy`` is not valid."""
    n = max(1, retry_number)
    if policy is None:
        policy = DEFAULT_POLICY
    if why := validate(policy):
        raise ValueError("backoff %s is not valid: %s" % (_short(policy), why))
    if isinstance(policy, (int, float)):
        return int(policy * 1000)
    if isinstance(policy, Mapping):
        return int(_exponential(policy, n, rng) * 1000)
    return int(policy[min(n, len(policy)) - 1] * 1000)


def _exponential(policy: Mapping[str, Any], n: int, rng: random.Random | None) -> float:
    base, factor = float(policy.get("base", 5)), float(policy.get("factor", 2))
    cap = float(policy.get("max", 3600))
    try:
        grown = base * factor ** (n - 1)
    except OverflowError:
        grown = math.inf
    seconds = 0.0 if base == 0 else min(grown, cap)
    if policy.get("jitter", True):
        seconds *= (rng or random).uniform(0.5, 1.0)
    return seconds


def validate(policy: object) -> str | None:
    """Return why ``policy`` is not a valid backoff, or ``None`` when it is."""
    if policy is None:
        return None
    if isinstance(policy, bool):
        return "a boolean is not a backoff"
    if isinstance(policy, (int, float)):
        return _seconds_problem(policy, "a fixed backoff")
    if isinstance(policy, Mapping):
        return _mapping_problem(policy)
    if isinstance(policy, Sequence) and not isinstance(policy, (str, bytes, bytearray)):
        return _list_problem(policy)
    return "expected seconds, a list of seconds or a dict, got %s" % type(policy).__name__


def _list_problem(policy: Sequence[object]) -> str | None:
    if not policy:
        return "an explicit backoff list must not be empty"
    if len(policy) > MAX_STEPS:
        return "an explicit backoff list holds at most %d delays, not %d" % (
            MAX_STEPS, len(policy))
    for i, value in enumerate(policy):
        if why := _seconds_problem(value, "delay [%d] of the list" % i):
            return why
    return None


def _mapping_problem(policy: Mapping[Any, Any]) -> str | None:
    unknown = [key for key in policy if key not in _KEYS]
    if unknown:
        return "unknown exponential backoff keys %s (use base, factor, max, jitter)" % (
            ", ".join(sorted(_short(k) for k in unknown)))
    for name in ("base", "max"):
        if name in policy and (why := _seconds_problem(policy[name], "exponential %r" % name)):
            return why
    if "factor" in policy:
        factor = policy["factor"]
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            return "exponential 'factor' must be a number, not %s" % _short(factor)
        if not (0 <= factor <= MAX_FACTOR):  # NaN fails both comparisons
            return "exponential 'factor' must be between 0 and %d, not %s" % (
                MAX_FACTOR, _short(factor))
    if "jitter" in policy and not isinstance(policy["jitter"], bool):
        return "exponential 'jitter' must be true or false, not %s" % _short(policy["jitter"])
    return None


def _seconds_problem(value: object, what: str) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "%s must be a number of seconds, not %s" % (what, _short(value))
    if not (0 <= value <= MAX_SECONDS):  # NaN fails both comparisons; ints never overflow
        return "%s must be between 0 and %d seconds (a year), not %s" % (
            what, MAX_SECONDS, _short(value))
    return None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
