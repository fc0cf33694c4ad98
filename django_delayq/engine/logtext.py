"""Text for a log line: ``shown`` escapes every character that is not printable, so a
value read from Redis or the database, a job's error text, an id, a callable path or a
queue name can neither forge a line nor recolour a terminal; ``text`` is ``str()`` that
never raises. Every layer's log calls use them (the engine is the lowest layer that logs);
no import of the rest of the engine. ``module_logger`` is the logger of a module that
logs tracebacks: its records' tracebacks keep their line breaks, every other character
that is not printable escaped as ``shown`` does (an exception's message may hold a
job's text or a value from Redis or the database).
"""

from __future__ import annotations

import logging
import traceback

SHOWN_CHARS = 300  # of one value on a log line


def text(value: object, limit: int | None = None) -> str:
    """``str(value)`` that never raises and is storable (lone surrogates escaped)."""
    try:
        out = value if isinstance(value, str) else str(value)
    except Exception:  # noqa: BLE001 - a broken __str__ of a job's exception
        out = "<unprintable %s>" % type(value).__name__
    if not out.isascii():
        out = out.encode("utf-8", "backslashreplace").decode("utf-8")
    return out if limit is None else out[:limit]


def shown(value: object, limit: int = SHOWN_CHARS, *, lines: bool = False) -> str:
    """``value`` as one line of printable text for a log: each character that is not
    printable (control characters, line breaks, bidirectional overrides, lone surrogates)
    as its Python escape (``\\n``, ``\\x1b``, ``\\u202e``); cut to ``limit`` characters
    with "..." (an error text is given 2,000). ``lines``: keep the line breaks (``\\n``)
    of a traceback, which a log record writes on its lines (``module_logger``)."""
    out = text(value) if not isinstance(value, str) else value
    if len(out) > limit:
        out = out[:limit] + "..."
    if out.isprintable():
        return out
    return "".join(ch if ch.isprintable() or (lines and ch == "\n")
                   else ch.encode("unicode_escape").decode("ascii") for ch in out)


def _traceback_part(part: str) -> str:
    """One part of a formatted traceback: a frame (``  File ...`` and its source line) or
    a chain's header keeps its line breaks; an exception's message (``Type: text``) is
    one line, whatever its text holds."""
    if part.startswith(("  ", "\n", "Traceback (most recent call last):")):
        return shown(part, len(part), lines=True)
    return shown(part.rstrip("\n"), len(part)) + "\n"


class _Tracebacks(logging.Filter):
    """Formats a record's traceback once, escaped (``_traceback_part``); a handler's
    ``logging.Formatter`` writes ``exc_text`` when it is set."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            parts = traceback.TracebackException(*record.exc_info).format()
            record.exc_text = "".join(map(_traceback_part, parts)).rstrip("\n")
        return True


_TRACEBACKS = _Tracebacks()


def module_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` whose records' tracebacks are escaped."""
    logger = logging.getLogger(name)
    if _TRACEBACKS not in logger.filters:
        logger.addFilter(_TRACEBACKS)
    return logger
