"""Schedule-time checks of jobs: errors name the bad value and its place.

Every way in (``schedule``, ``schedule_spec``, ``schedule_many``, ``schedule_dataframe``,
``reschedule``, ``requeue``) runs these same checks, and each raises ``InvalidJob``, never
an ``OverflowError``, ``RecursionError``, ``UnicodeEncodeError`` or a database's
``DataError`` from deeper down, the same on every database:

* arguments are JSON, nested at most ``MAX_DEPTH`` levels, and their strings (dict keys
  too) are storable: no lone surrogate, which no database can store as UTF-8, and no NUL,
  which PostgreSQL cannot store (``text_problem``);
* a delay is at most ``MAX_DELAY_SECONDS`` (100 years); ``at`` converts to epoch
  milliseconds (years 1 to 9999 do) and is at most as far ahead as a delay; an aware one
  without ``USE_TZ`` has a local wall time, which its row stores (``stored_time``);
* a queue is one of ``DELAYQ["QUEUES"]`` (with ``any_queue``, any storable name);
* the arguments bind to the function's signature (``registry.bind``, ``registry.Binder``);
* the payload limit ``MAX_PAYLOAD_BYTES`` counts UTF-8 bytes;
* a bulk call's ``batch_size`` is an int of at least 1 (``check_batch_size``).

Each job option's own check (its key, retries, group ...) is in core/option_checks.py.

The worker applies the same limits to what it reads back from a row (``payloads``).
"""

from __future__ import annotations

import itertools
import json
import keyword
import math
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeGuard, TypeVar

from django.conf import settings

from django_delayq.exceptions import InvalidJob, JobNotFound

MAX_PATH = 255  # characters of a job path or an allow-list entry
_SEGMENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
MAX_DEPTH = 100  # deeper than this is a mistake (or a circular structure)
MAX_DELAY_SECONDS = 100 * 365 * 24 * 3600  # 100 years
MAX_QUEUE_NAME = 100  # the row's ``queue`` column

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def find_bad(value: object, where: str, depth: int = 0, ints: bool = False) -> str | None:
    """What in ``value`` is not JSON (or not storable), named with its place, or None;
    ``ints``: an int past the int-to-text digit limit too (only the encoder's ValueError
    says one may be there: looking for it costs every int a call)."""
    if isinstance(value, str):
        if "\x00" not in value and utf8_ok(value):  # text_problem's test, inline: per string
            return None
        return "%s = %s (%s)" % (where, short(value), text_problem(value))
    if value is None or isinstance(value, bool) or (isinstance(value, int) and not ints):
        return None
    if isinstance(value, int | float):
        return _bad_number(value, where)
    if isinstance(value, (list, tuple, dict)):
        return _find_bad_inside(value, where, depth, ints)
    return "%s = %s (%s)" % (where, short(value), type(value).__name__)


def _bad_number(value: float, where: str) -> str | None:
    if isinstance(value, float):
        return None if math.isfinite(value) else "%s = %r (not finite)" % (where, value)
    return None if (digits := too_long_int(value)) is None else (
        "%s = an integer of more than %d digits (JSON text of it is refused here: "
        "sys.set_int_max_str_digits)" % (where, digits))


def _find_bad_inside(value: list[object] | tuple[object, ...] | dict[object, object],
                     where: str, depth: int, ints: bool) -> str | None:
    """``find_bad`` of a list, a tuple or a dict: its depth, then its items."""
    if depth >= MAX_DEPTH:
        place = where if len(where) <= 120 else where[:57] + "..." + where[-60:]
        return "%s is nested more than %d levels deep (circular?)" % (place, MAX_DEPTH)
    is_dict = isinstance(value, dict)
    for key, item in value.items() if is_dict else enumerate(value):  # type: ignore[union-attr]
        if is_dict and not isinstance(key, str):
            return "%s has the key %r (%s), not a string as JSON keys are" % (
                where, key, type(key).__name__)
        if isinstance(key, str) and ("\x00" in key or not utf8_ok(key)):
            return "%s has the key %s (%s)" % (where, short(key), text_problem(key))
        if bad := find_bad(item, "%s[%r]" % (where, key), depth + 1, ints):  # index: %d
            return bad
    return None


def too_long_int(value: int) -> int | None:
    """The digit limit of int-to-text conversions (``sys.get_int_max_str_digits``) when
    ``value`` is past it, else None; a bit length test first, so any usual int costs one."""
    limit = sys.get_int_max_str_digits()
    if not limit or value.bit_length() < limit * 3:  # 3 bits a digit at least: shorter
        return None
    try:
        str(value)
    except ValueError:
        return limit
    return None


SURROGATE = "a lone surrogate: not valid Unicode, cannot be stored as UTF-8"
NUL = "a NUL character, which PostgreSQL cannot store: refused on every database"


def text_problem(text: str) -> str | None:
    """Why the string ``text`` cannot be stored (``NUL``, ``SURROGATE``), or None."""
    if "\x00" in text:
        return NUL
    return None if utf8_ok(text) else SURROGATE


def utf8_ok(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8 (no lone surrogate); O(1) for ASCII text."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def short(value: object, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, never raising (the checks of schedule())."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = "<%s>" % type(value).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


class ItemError(InvalidJob):
    """The ``InvalidJob`` of one job among many (``chain``, ``group``, ``schedule_many``):
    its position ``index`` (``None``: the only one of its kind, ``group``'s ``then``) and
    a short form of its arguments, before ``detail``, the job's own error."""

    index: int | None
    detail: str

    def __init__(self, where: str, index: int | None, args: object, kwargs: object,
                 error: InvalidJob) -> None:
        self.index, self.detail = index, (error.detail if isinstance(error, ItemError)
                                          else str(error))
        shown = "args %s" % short(tuple(args) if isinstance(args, list) else args, 80)
        if kwargs:
            shown += ", kwargs %s" % short(kwargs, 80)
        at = where if index is None else "%s item %d" % (where, index)
        super().__init__("%s (%s): %s" % (at, shown, self.detail), option=error.option)


T = TypeVar("T")


def each(where: str, items: Sequence[Any], make: Callable[[Any], T],
         positions: Sequence[int] | None = None) -> list[T]:
    """``make(item)`` for each of ``items`` (each with ``args`` and ``kwargs``: a
    ``JobSpec``, a ``Signature``); an ``InvalidJob`` names the item's position (its index,
    or ``positions[index]``) and arguments (``ItemError``)."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(make(item))
        except InvalidJob as exc:
            at = i if positions is None else positions[i]
            raise ItemError(where, at, item.args, item.kwargs, exc) from None
    return out


def not_json(bad: str) -> InvalidJob:
    """The error for a value that is not JSON; ``bad`` names it and its place."""
    return InvalidJob("job arguments must be JSON (str, int, float, bool, None, list, dict): "
                      "%s. Pass an id or a plain value instead." % bad)


def check_json(args: object, kwargs: dict[str, Any], ints: bool = False) -> None:
    for value, name in ((args, "args"), (kwargs, "kwargs")):
        if bad := find_bad(value, name, ints=ints):
            raise not_json(bad)


def holds_nul(value: object) -> bool:
    """Whether a JSON value (one the encoder took) holds a NUL in a string or a key."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    return isinstance(value, (list, tuple)) and any(holds_nul(v) for v in value)


# Compact JSON, non-ASCII kept, NaN refused (``json.dumps`` with these options makes an
# encoder per call: ~1 µs of a ``schedule()``; one is kept).
dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


_OWN_JSON = frozenset((type(None), bool, int, float, str))


def json_value(value: Any) -> Any:
    """The JSON value of ``value`` a JSON column stores and reads back (a tuple becomes a
    list, a dict's keys strings, a subclass its base), ``value`` itself when it is one
    already (a number, a string: most job results). ``value`` must encode."""
    return value if type(value) in _OWN_JSON else json.loads(dumps(value))


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON ``text`` nests deeper than ``limit`` (cheap when it has few brackets:
    no deeper than their count). Its depth is measured without recursion: O(len) in C
    (regular expressions) plus one step per bracket."""
    if text.count("[") + text.count("{") <= limit:
        return False
    if '"' in text:
        text = _STRING.sub("", text)
    brackets = _NOT_BRACKET.sub("", text)
    return max(itertools.accumulate(_STEP[c] for c in brackets), default=0) > limit


def encode_args(args: list[Any], kwargs: dict[str, Any]) -> tuple[str, str, int]:
    """Check both and return their JSON and its size in UTF-8 bytes, at the C encoder's
    speed when the values are plain: the walk that names a bad value runs only when
    encoding fails, when the text nests deeply or is not valid Unicode, when a dict is
    involved (``json.dumps`` would quietly turn non-string keys into strings), or when the
    text holds ``\\u0000``, the encoder's escape of NUL (the walk refuses a NUL; a string
    with a backslash followed by ``u0000`` passes it)."""
    try:
        args_json = dumps(args)
        kwargs_json = dumps(kwargs) if kwargs else "{}"
    except (TypeError, ValueError, RecursionError) as exc:
        # names the value (the depth limit bounds the walk; a ValueError: a long int too)
        check_json(args, kwargs, ints=isinstance(exc, ValueError))
        raise InvalidJob("job arguments must be JSON: %s" % type(exc).__name__) from None
    if kwargs or "{" in args_json or ("\\" in args_json and "\\u0000" in args_json):
        check_json(args, kwargs)  # a backslash first: a one-character scan runs at memchr speed
    for text in (args_json, kwargs_json):
        if len(text) > MAX_DEPTH and too_deep(text, MAX_DEPTH):  # shorter: too few brackets
            check_json(args, kwargs)
            raise not_json("a value nested more than %d levels deep" % MAX_DEPTH)
    try:
        size = utf8_size(args_json) + utf8_size(kwargs_json)
    except UnicodeEncodeError:
        check_json(args, kwargs)
        raise not_json("a string with %s" % SURROGATE) from None
    return args_json, kwargs_json, size


def check_size(size: int, limit: int, where: str = "") -> None:
    if size > limit:
        raise InvalidJob("job payload is %d bytes, over DELAYQ['MAX_PAYLOAD_BYTES'] = %d%s; "
                         "pass ids instead of data (the limit counts UTF-8 bytes)"
                         % (size, limit, where))


def check_text(value: object, what: str) -> None:
    """A string option (key, callable path) that must be storable."""
    if isinstance(value, str) and not utf8_ok(value):
        raise InvalidJob("%s %s contains %s" % (what, short(value), SURROGATE))


def as_seconds(value: object) -> float | None:
    """Seconds of a ``timedelta`` or a number (``None`` for anything else, ``bool``
    included); an integer too large for a float is infinite."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not abs(value) >= 1e300:  # NaN too: kept, named as such
            return float(value)
        return math.inf if value > 0 else -math.inf  # float() of it would overflow
    return None


def delay_seconds(delay: object, what: str = "delay") -> float:
    """``delay`` checked (``what``: its name in the errors)."""
    if (seconds := as_seconds(delay)) is None:
        raise InvalidJob("%s must be seconds (int/float) or a timedelta, not %s"
                         % (what, short(delay)))
    if math.isnan(seconds):
        raise InvalidJob("%s must be a number of seconds, got %s (not a number)"
                         % (what, short(delay)))
    if not seconds >= 0:
        raise InvalidJob("%s must be >= 0, got %s" % (what, short(delay)))
    if seconds > MAX_DELAY_SECONDS:
        raise InvalidJob("%s must be at most %d seconds (100 years), got %s"
                         % (what, MAX_DELAY_SECONDS, short(delay)))
    return seconds


def check_at(at: object, use_tz: bool, what: str = "at") -> datetime:
    """``at`` checked: a datetime (aware with ``USE_TZ``) that converts to UTC and to
    epoch milliseconds without overflowing (``what``: its name in the errors)."""
    if not isinstance(at, datetime):
        raise InvalidJob("%s must be a datetime, not %s" % (what, short(at)))
    try:
        if (offset := at.utcoffset()) is not None:
            at.astimezone(UTC)
        at.timestamp()
    except (OverflowError, ValueError, OSError, TypeError) as exc:
        raise InvalidJob("%s=%s cannot be converted to a time (%s); use a year from 1 to "
                         "9999" % (what, short(at), exc)) from None
    if use_tz and offset is None:
        raise InvalidJob("%s=%s is a naive datetime while USE_TZ=True; pass an aware one "
                         "(django.utils.timezone.make_aware or datetime(..., tzinfo=...))"
                         % (what, at.isoformat()))
    if at.timestamp() - time.time() > MAX_DELAY_SECONDS:
        raise InvalidJob("%s=%s is more than 100 years from now (at most %d seconds ahead, "
                         "as delay)" % (what, at.isoformat(), MAX_DELAY_SECONDS))
    return at


def stored_time(at: datetime, use_tz: bool, what: str = "at") -> datetime:
    """The datetime a row stores for ``at`` (passed ``check_at``): ``at`` itself with
    ``USE_TZ`` or when naive; else an aware ``at``'s wall time in the local time zone,
    naive, as Django stores datetimes without ``USE_TZ`` (SQLite and MySQL refuse an aware
    one). Local: this process's, which Django sets to ``TIME_ZONE``, the zone of Django's
    naive ``now()`` and of the epoch time Redis gets for a naive ``at`` (``at_ms``)."""
    if use_tz or at.tzinfo is None:
        return at
    try:
        return at.astimezone().replace(tzinfo=None)
    except (OverflowError, ValueError, OSError) as exc:
        raise InvalidJob("%s=%s has no wall time in TIME_ZONE %r (%s), the naive time "
                         "USE_TZ=False stores; use a time from year 1 to 9999 there"
                         % (what, at.isoformat(), settings.TIME_ZONE, exc)) from None


def when(delay: object, at: object, use_tz: bool) -> tuple[datetime | None, float]:
    """The due time checked: ``(at, 0)``, or ``(None, delay in seconds)``."""
    if delay is not None and at is not None:
        raise InvalidJob("pass delay or at, not both (delay=%r, at=%r)" % (delay, at))
    return ((check_at(at, use_tz), 0.0) if at is not None
            else (None, delay_seconds(0 if delay is None else delay)))


def check_queue(queue: object, queues: tuple[str, ...], any_queue: bool) -> str:
    """A queue of ``DELAYQ["QUEUES"]`` (``queues``); with ``any_queue`` (a Tasks backend
    whose QUEUES is empty) any name a worker can be started for with ``--queues``."""
    if isinstance(queue, str) and queue in queues:
        return queue
    if not any_queue:
        raise InvalidJob("unknown queue %r; DELAYQ['QUEUES'] is %r" % (queue, list(queues)))
    if not isinstance(queue, str) or not_a_queue_name(queue):
        raise InvalidJob("queue %s is not a queue name: %s" % (short(queue), QUEUE_NAME_RULE))
    return queue


# The one rule for a queue name: DELAYQ["QUEUES"], DEFAULT_QUEUE, QUEUE_OPTIONS' keys, a
# queue a Tasks backend with QUEUES [] lets through, ``--queues``.
QUEUE_NAME_RULE = ("1 to %d printable characters without braces or commas, neither starting "
                   "nor ending with a space, not ending in #<digits> (a sharded queue's "
                   "shard names)" % MAX_QUEUE_NAME)


def not_a_queue_name(queue: object) -> bool:
    """Whether ``queue`` cannot name a queue: not a string, empty, longer than the row's
    column, not printable (control characters), with braces (a hash tag), with a comma
    or a leading or trailing space (``--queues`` splits on commas and strips spaces: no
    worker could be started for it), or named like shard i of another queue (``q#i``,
    engine/shard_map.py): its jobs would land in that shard's keys."""
    return (not isinstance(queue, str) or not queue or len(queue) > MAX_QUEUE_NAME
            or not queue.isprintable() or queue != queue.strip()
            or any(c in queue for c in "{},") or re.fullmatch(r".+#[0-9]+", queue) is not None)


def queue_list_problems(queues: object) -> list[str]:
    """The problems of ``DELAYQ["QUEUES"]``: not a non-empty list, a name that is no
    queue's (``not_a_queue_name``), a name listed more than once; each names the value."""
    if not isinstance(queues, (list, tuple)) or not queues:
        return ["DELAYQ['QUEUES'] must be a non-empty list of queue names such as ['default', "
                "'emails'], not %s" % short(queues)]
    found = []
    if bad := [q for q in queues if not_a_queue_name(q)]:
        found.append("DELAYQ['QUEUES'] %s: not queue names: %s (a queue name is %s)"
                     % (short(queues), ", ".join(map(short, bad)), QUEUE_NAME_RULE))
    if twice := list(dict.fromkeys(short(q) for i, q in enumerate(queues) if q in queues[:i])):
        found.append("DELAYQ['QUEUES'] %s lists %s twice: name each queue once"
                     % (short(queues), ", ".join(twice)))
    return found


def askable_id(job_id: object) -> TypeGuard[str]:
    """Whether a database can be asked for ``job_id``: a string without NUL or a lone
    surrogate (a lookup by id, ``after=``)."""
    return isinstance(job_id, str) and "\x00" not in job_id and utf8_ok(job_id)


def check_lookup_id(job_id: object) -> None:
    """``JobNotFound`` for an id no row can have and no database can be asked for
    (``askable_id``), naming it escaped."""
    if not askable_id(job_id):
        hint = "; pass its .id" if isinstance(getattr(job_id, "id", None), str) else ""
        raise JobNotFound("no job with id %s%s" % (short(job_id), hint))


def at_ms(at: datetime) -> int:
    """Epoch milliseconds of an ``at`` that passed ``check_at``."""
    return int(at.timestamp() * 1000)


def check_batch_size(value: object) -> int:
    """``batch_size`` (``schedule_many``, ``schedule_dataframe``): an int of at least 1,
    checked before anything is written or sent (the INSERT loop steps by it)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidJob("batch_size must be an integer of at least 1 (not a bool), not %s"
                         % short(value))
    return value


def name_problem(dotted: object, *, what: str = "module name") -> str | None:
    """Why ``dotted`` is not a dotted name the allow-list accepts, or ``None``."""
    if not isinstance(dotted, str) or not dotted:
        return "not a %s" % what
    if len(dotted) > MAX_PATH:
        return "longer than %d characters" % MAX_PATH
    for segment in dotted.split("."):
        if not _SEGMENT.fullmatch(segment):
            if segment.startswith("_"):
                return ("%r starts with '_': special and private names are never jobs"
                        % segment)
            return "%r is not an ASCII identifier" % segment
        if keyword.iskeyword(segment):
            return "%r is a Python keyword" % segment
    return None

