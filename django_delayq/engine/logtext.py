"""Text for a log line: ``shown`` escapes every character that is not printable, so a
value read from Redis or the database, a job's error text, an id, a callable path or a
queue name can neither forge a line nor recolour a terminal; ``text`` is ``str()`` that
never raises; ``logged`` is a log call that never raises. Every layer's log calls use
them (the engine is the lowest layer that logs); no import of the rest of the engine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

SHOWN_CHARS = 300  # of one value on a log line
ERROR_CHARS = 2000  # of an error's text (an exception's, a job's error)


def text(value: object, limit: int | None = None) -> str:
    """``str(value)`` that never raises and is storable (lone surrogates escaped)."""
    try:
        out = value if isinstance(value, str) else str(value)
    except Exception:  # noqa: BLE001 - a broken __str__ of a job's exception
        out = "<unprintable %s>" % type(value).__name__
    if not out.isascii():
        out = out.encode("utf-8", "backslashreplace").decode("utf-8")
    return out if limit is None else out[:limit]


def shown(value: object, limit: int | None = None) -> str:
    """``value`` as one line of printable text for a log: each character that is not
    printable (control characters, line breaks, bidirectional overrides, lone surrogates)
    as its Python escape (``\\n``, ``\\x1b``, ``\\u202e``); cut to ``limit`` characters
    with "...": by default ``ERROR_CHARS`` for an exception (a libpq error names each host
    it tried), else ``SHOWN_CHARS`` (a job's error text is given ``ERROR_CHARS``). A
    traceback is not passed here: ``exc_info`` leaves it to the project's formatter."""
    if limit is None:
        limit = ERROR_CHARS if isinstance(value, BaseException) else SHOWN_CHARS
    out = text(value) if not isinstance(value, str) else value
    if len(out) > limit:
        out = out[:limit] + "..."
    if out.isprintable():
        return out
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in out)


def logged(log: Callable[..., object], *args: object) -> None:
    """``log(*args)`` where a failing log call must not end the thread's work (a worker
    thread logging why a job failed around it: the project's handler may be what
    raised)."""
    with contextlib.suppress(BaseException):  # the thread's jobs matter more than a line
        log(*args)
