"""Retry delays: pure functions from (policy, attempt) to milliseconds.

A policy is plain JSON so it can ride in the envelope:

* a number ``s``                      fixed: ``s`` seconds between attempts
* a list ``[15, 180, 600]``           explicit: the n-th retry waits the n-th value
                                      (the last one repeats)
* ``{"base": 5, "factor": 2, "max": 3600, "jitter": true}``
                                      exponential: ``base * factor**(n-1)`` capped at
                                      ``max``, with full jitter in [50 %, 100 %]
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_POLICY: dict[str, Any] = {"base": 5, "factor": 2, "max": 3600, "jitter": True}


def delay_ms(policy: Any, retry_number: int, rng: random.Random | None = None) -> int:
    """Milliseconds to wait before retry ``retry_number`` (1 = first retry)."""
    n = max(1, retry_number)
    if policy is None:
        policy = DEFAULT_POLICY
    if isinstance(policy, bool):
        raise ValueError("backoff must be a number, a list or a dict, not %r" % (policy,))
    if isinstance(policy, (int, float)):
        return int(policy * 1000)
    if isinstance(policy, Sequence) and not isinstance(policy, str):
        return int(policy[min(n, len(policy)) - 1] * 1000)
    if isinstance(policy, Mapping):
        seconds = min(
            float(policy.get("base", 5)) * float(policy.get("factor", 2)) ** (n - 1),
            float(policy.get("max", 3600)),
        )
        if policy.get("jitter", True):
            seconds *= (rng or random).uniform(0.5, 1.0)
        return int(seconds * 1000)
    raise ValueError("backoff must be a number, a list or a dict, not %r" % (policy,))


def validate(policy: Any) -> str | None:
    """Return why ``policy`` is not a valid backoff, or ``None`` when it is."""
    if policy is None:
        return None
    if isinstance(policy, bool):
        return "a boolean is not a backoff"
    if isinstance(policy, (int, float)):
        return None if policy >= 0 else "a fixed backoff must be >= 0 seconds"
    if isinstance(policy, Sequence) and not isinstance(policy, str):
        if not policy:
            return "an explicit backoff list must not be empty"
        bad = [v for v in policy if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0]
        return "every delay in the list must be a number >= 0, not %r" % (bad[0],) if bad else None
    if isinstance(policy, Mapping):
        unknown = set(policy) - {"base", "factor", "max", "jitter"}
        if unknown:
            return "unknown exponential backoff keys %s (use base, factor, max, jitter)" % sorted(
                unknown
            )
        for name in ("base", "factor", "max"):
            value = policy.get(name, 1)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                return "exponential backoff %r must be a number >= 0, not %r" % (name, value)
        return None
    return "expected seconds, a list of seconds or a dict, got %s" % type(policy).__name__
