"""The job envelope of the bare engine: a compact JSON array.

``[callable_path, args, kwargs, max_attempts, backoff]`` — trailing defaults are
dropped (``kwargs`` ``{}``, ``max_attempts``/``backoff`` ``None``) so a job with small
arguments costs a few dozen bytes. ``recover.lua`` reads index 4 (``max_attempts``).

Envelopes in Redis are for the bare engine used without Django (``NewJob(envelope=...)``),
and that mode trusts whoever can write to Redis: an envelope names the code to run. The
Django worker never runs from an envelope; it reads each claimed job's audit row
(``django_delayq.core.payloads``), and ``Envelope`` there is only the payload's type.
``decode`` refuses anything malformed with a ``ValueError`` (never a ``RecursionError``),
so a bare-engine consumer can end such a job instead of failing.

The run-time options (``priority``, ``timeout`` in seconds, ``expires_ms`` in epoch
milliseconds, ``retry_on`` exception class paths, ``atomic``, and ``tick``: the row's key
names a periodic schedule's tick) come from the row only: ``encode`` and ``decode`` leave
them out (a bare-engine job has the defaults: priority 0, no time limit of its own, no
expiry, every exception retried, not atomic, no tick).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django_delayq.engine import backoff as backoff_mod

JSONValue = Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    path: str
    args: list[JSONValue] = field(default_factory=list)
    kwargs: dict[str, JSONValue] = field(default_factory=dict)
    max_attempts: int | None = None
    backoff: JSONValue = None
    priority: int = 0
    timeout: float | None = None
    expires_ms: int | None = None
    retry_on: tuple[str, ...] | None = None
    atomic: bool = False
    tick: bool = False  # a periodic schedule's tick job: its start creates the next tick

    def encode(self) -> str:
        parts: list[Any] = [self.path, self.args, self.kwargs, self.max_attempts, self.backoff]
        while len(parts) > 2 and parts[-1] in (None, {}):
            parts.pop()
        return json.dumps(parts, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    @classmethod
    def decode(cls, raw: str | bytes) -> Envelope:
        """Parse an envelope; raises ``ValueError`` on anything malformed."""
        try:
            data = json.loads(raw)
        except RecursionError:
            raise ValueError("envelope is nested too deeply to decode") from None
        if not isinstance(data, list) or len(data) < 2 or not isinstance(data[0], str):
            raise ValueError("envelope is not [path, args, ...]: %r" % (raw[:200],))
        args, kwargs = data[1], data[2] if len(data) > 2 else {}
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValueError("envelope args/kwargs have the wrong types: %r" % (raw[:200],))
        max_attempts = data[3] if len(data) > 3 else None
        if max_attempts is not None and (isinstance(max_attempts, bool)
                                         or not isinstance(max_attempts, int)
                                         or max_attempts < 1):
            raise ValueError("envelope max_attempts is not an integer >= 1: %r" % (max_attempts,))
        backoff = data[4] if len(data) > 4 else None
        if why := backoff_mod.validate(backoff):
            raise ValueError("envelope backoff is not valid: %s" % why)
        return cls(path=data[0], args=args, kwargs=kwargs, max_attempts=max_attempts,
                   backoff=backoff)
