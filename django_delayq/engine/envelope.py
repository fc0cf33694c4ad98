"""The job envelope stored in Redis: a compact JSON array.

``[callable_path, args, kwargs, max_attempts, backoff]`` — trailing defaults are
dropped (``kwargs`` ``{}``, ``max_attempts``/``backoff`` ``None``) so a job with small
arguments costs a few dozen bytes. ``recover.lua`` reads index 4 (``max_attempts``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

JSONValue = Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    path: str
    args: list[JSONValue] = field(default_factory=list)
    kwargs: dict[str, JSONValue] = field(default_factory=dict)
    max_attempts: int | None = None
    backoff: JSONValue = None

    def encode(self) -> str:
        parts: list[Any] = [self.path, self.args, self.kwargs, self.max_attempts, self.backoff]
        while len(parts) > 2 and parts[-1] in (None, {}):
            parts.pop()
        return json.dumps(parts, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    @classmethod
    def decode(cls, raw: str | bytes) -> Envelope:
        """Parse an envelope; raises ``ValueError`` on anything malformed."""
        data = json.loads(raw)
        if not isinstance(data, list) or len(data) < 2 or not isinstance(data[0], str):
            raise ValueError("envelope is not [path, args, ...]: %r" % (raw[:200],))
        args, kwargs = data[1], data[2] if len(data) > 2 else {}
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValueError("envelope args/kwargs have the wrong types: %r" % (raw[:200],))
        max_attempts = data[3] if len(data) > 3 else None
        if max_attempts is not None and not isinstance(max_attempts, int):
            raise ValueError("envelope max_attempts is not an integer: %r" % (max_attempts,))
        return cls(
            path=data[0],
            args=args,
            kwargs=kwargs,
            max_attempts=max_attempts,
            backoff=data[4] if len(data) > 4 else None,
        )
