"""Reading script replies: text of reply items (strict, or for a log), ids as the scripts
check them (``bad_id``), stream entry ids in order, and list chunks for bounded calls
(and items grouped by a key: by queue, by shard, by stream).
Shared by the ``Engine``'s method groups; no Redis here, and no import of the rest of the
engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

# A scalar reply of redis-py: bytes, or text with decode_responses; a number; nil.
Scalar = bytes | str | int | float | None

_T = TypeVar("_T")
_K = TypeVar("_K")

# Poison entries: what the scripts refuse as a job id (lib.lua's bad_id says the same).
MAX_ID_BYTES = 256


def text(value: object) -> str:
    """Text of a reply item; strict: bytes that are not UTF-8 raise UnicodeDecodeError."""
    return value.decode() if isinstance(value, bytes) else str(value)


def loose(value: object) -> str:
    """Text of a reply item, bytes that are not UTF-8 as \\xHH (the ids a script set
    aside: those it moved to dead are UTF-8, those it removed came escaped already)."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def shown(value: object) -> str:
    """A reply item for a log line, whatever it holds (repr-escaped, cut to 100 chars)."""
    seen = repr(value)
    return seen if len(seen) <= 100 else seen[:97] + "..."


def escaped(raw: object) -> str:
    """An id as ASCII for a log, other bytes as \\xHH, cut to 64 bytes (as the scripts
    show the ids they remove)."""
    data = raw if isinstance(raw, bytes) else str(raw).encode("utf-8", "surrogateescape")
    return "".join(chr(b) if 32 <= b < 127 else "\\x%02x" % b for b in data[:64])


def chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def grouped(items: Iterable[_T], key: Callable[[_T], _K]) -> dict[_K, list[_T]]:
    """``items`` by ``key`` (their queue, their shard), each list in their order."""
    groups: dict[_K, list[_T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def bad_id(job_id: str) -> str | None:
    """Why ``job_id`` cannot be a job id in Redis, or None. The scripts apply the same
    rule (``lua/lib.lua``) to what they find, and set such an entry aside."""
    if not job_id:
        return "empty id"
    ascii_only = job_id.isascii()
    try:
        size = len(job_id) if ascii_only else len(job_id.encode())
    except UnicodeEncodeError:
        return "id is not UTF-8"
    if size > MAX_ID_BYTES:
        return "id longer than %d bytes" % MAX_ID_BYTES
    control = (not job_id.isprintable() if ascii_only
               else any(c < " " or c == "\x7f" for c in job_id))
    return "id has control characters" if control else None


def envelope_text(value: object) -> str:
    """An envelope as text; bytes that are not UTF-8 become U+FFFD (and fail JSON later,
    so the job goes dead with a reason instead of stopping the worker)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def integer(value: Scalar) -> int:
    """An integer reply, 0 when absent or not a number (a value planted by hand)."""
    try:
        return int(value) if value is not None else 0
    except (TypeError, ValueError, OverflowError):
        return 0


def opt(value: bytes | str | int) -> int | None:
    number = int(value)
    return None if number < 0 else number


def entry_order(entry_id: object) -> tuple[int, int]:
    """A stream entry id (``<ms>-<seq>``) as a sortable pair."""
    ms, _, seq = text(entry_id).partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return 0, 0
