"""The arguments of ``export_jobs``, checked before anything is read or written.

A bad one is a ``BadArgument`` (a ValueError) naming it and the value, which
``delayq_export`` reports as a usage error (exit 2): a column choice it cannot keep, an
empty ``since``/``until`` range, a ``settle`` or ``overlap`` out of range. Left
unchecked, a negative settle put the high-water mark in the future and a negative
overlap was written to the state file, which the next run then refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import pyarrow as pa

from django_delayq.spark import schema

KEEP = frozenset({"id", "created_at", "updated_at"})  # paging, partitions, newest version
MAX_SPAN = timedelta(days=365)  # a longer settle or overlap: a --full export


class BadArgument(ValueError):
    """A bad argument of ``export_jobs``: nothing was read or written (the command's
    usage error, exit 2)."""


def _names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Column names from ``"a,b"`` or ``["a", "b,c"]``, sorted, without duplicates."""
    if value is None:
        return ()
    parts = [value] if isinstance(value, str) else list(value)
    return tuple(sorted({n.strip() for p in parts for n in p.split(",") if n.strip()}))


def column_choice(exclude: str | Iterable[str] | None,
                  redact: str | Iterable[str] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Validated ``(exclude, redact)``; a BadArgument names every bad column."""
    left_out, hidden = _names(exclude), _names(redact)
    known = set(schema.JOB_COLUMNS)
    text = {f.name for f in schema.JOB_SCHEMA if pa.types.is_string(f.type)}
    problems = []
    if unknown := sorted((set(left_out) | set(hidden)) - known):
        problems.append("unknown column(s) %s (columns: %s)"
                        % (", ".join(unknown), ", ".join(schema.JOB_COLUMNS)))
    if needed := sorted((set(left_out) | set(hidden)) & KEEP):
        problems.append("%s cannot be excluded or redacted (needed to page, partition and "
                        "deduplicate)" % ", ".join(needed))
    if both := sorted(set(left_out) & set(hidden)):
        problems.append("%s both excluded and redacted; pick one" % ", ".join(both))
    if not_text := sorted(set(hidden) & (known - text - KEEP)):
        problems.append("only text columns can be redacted, not %s (exclude them instead)"
                        % ", ".join(not_text))
    if problems:
        raise BadArgument("; ".join(problems))
    return left_out, hidden


def check_arguments(since: datetime | None, until: datetime | None, chunk_size: int,
                    settle: timedelta, overlap: timedelta, exclude: str | Iterable[str] | None,
                    redact: str | Iterable[str] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The columns ``export_jobs`` leaves out and redacts (``column_choice``), or a
    BadArgument naming the first value it cannot use. ``since`` and ``until`` are aware
    datetimes (the state file keeps them with their zone) and the range is not empty;
    ``chunk_size`` is an int > 0; ``settle`` and ``overlap`` are timedeltas from 0 to a
    year (a negative settle puts the mark in the future; a negative overlap is refused
    by the next run)."""
    for name, when in (("since", since), ("until", until)):
        if when is not None and (not isinstance(when, datetime) or when.tzinfo is None):
            raise BadArgument("%s must be a datetime with a time zone, not %r" % (name, when))
    if since is not None and until is not None and since >= until:
        raise BadArgument("since %s is not before until %s: the range is empty"
                          % (since.isoformat(), until.isoformat()))
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        raise BadArgument("chunk_size must be an int > 0, not %r" % (chunk_size,))
    for name, span in (("settle", settle), ("overlap", overlap)):
        if not isinstance(span, timedelta) or not timedelta(0) <= span <= MAX_SPAN:
            shown = "timedelta(seconds=%r)" % span.total_seconds() \
                if isinstance(span, timedelta) else repr(span)  # not days=-1, seconds=86395
            raise BadArgument("%s must be a timedelta from 0 to 365 days (a year), not %s"
                              % (name, shown))
    return column_choice(exclude, redact)
