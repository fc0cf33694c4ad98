"""Each job option's own check: ``InvalidJob`` naming the option and the bad value.

``JobOptions.check`` (core/options.py) runs them; so do the places that take one option
on its own: ``DELAYQ["DEFAULT_MAX_ATTEMPTS"]`` and ``["DEFAULT_BACKOFF"]`` (core/conf.py),
a group of the group controls (core/queues.py, core/group_limits.py) and of
``DELAYQ["SCHEDULES"]`` (core/conf.py), a row read back (core/payloads.py). Nothing
here needs Django's settings or the job's function (``check_atomic`` does: it stays with
``JobOptions``), so the settings' own checks may use them.

* ``priority``: an integer from -100 to 100 (``bool`` refused);
* ``timeout``: seconds > 0 (a number or a ``timedelta``), at most ``MAX_TIMEOUT_SECONDS``;
* ``expires``: a datetime, or seconds / a ``timedelta`` from now, after now and after the
  job's due time (``expires_at``);
* ``retry_on``: exception classes or their dotted paths, at most ``MAX_RETRY_ON``; a path
  (``module.Class``) is imported and stored as the path of the class it names, the one
  the worker compares (``socket.error`` is ``builtins.OSError``);
* ``key``: a non-empty string of at most ``MAX_KEY_LENGTH`` characters, storable: no lone
  surrogate, no control character (PostgreSQL cannot store NUL); ``on_conflict``: one of
  ``ON_CONFLICT``, other than ``keep`` only with a key;
* ``max_attempts``: 1 to ``MAX_ATTEMPTS``; ``backoff``: passes ``engine.backoff.validate``
  (finite seconds, at most a year per step);
* ``group``: 1 to ``MAX_GROUP`` characters, no control characters, no line breaks;
* ``after``: ``JobHandle`` objects or job ids (``parent_ids``); ``after_failure``: one of
  ``AFTER_FAILURE``.

``SCHEDULES`` names the options a periodic schedule sets, with their checks.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any

from django_delayq.core import validation
from django_delayq.core.validation import short
from django_delayq.engine import backoff as backoff_mod
from django_delayq.exceptions import InvalidJob, type_path

MIN_PRIORITY, MAX_PRIORITY = -100, 100
MAX_TIMEOUT_SECONDS = 365 * 24 * 3600.0  # a year
MAX_RETRY_ON = 50  # exception classes in one retry_on
KEEP, REPLACE, DROP = "keep", "replace", "drop"  # on_conflict= (core/workflows.py)
ON_CONFLICT = (KEEP, REPLACE, DROP)
AFTER_FAILURE = {"cancel": False, "run": True}
MAX_ATTEMPTS = 1000
MAX_KEY_LENGTH = 255  # the row's ``key`` column
MAX_GROUP = 128  # characters of a group id (the row's ``group`` column)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode's control characters (Cc)
_LINE_BREAK = re.compile("[\u2028\u2029]")  # line and paragraph separators (Zl, Zp)


def check_priority(value: object) -> int:
    if (isinstance(value, bool) or not isinstance(value, int)
            or not MIN_PRIORITY <= value <= MAX_PRIORITY):
        raise InvalidJob("priority must be an integer from %d to %d, not %s"
                         % (MIN_PRIORITY, MAX_PRIORITY, short(value)))
    return value


def timeout_seconds(value: object) -> float | None:
    if value is None:
        return None
    if (seconds := validation.as_seconds(value)) is None:
        raise InvalidJob("timeout must be seconds (int/float) > 0, a timedelta or None, not %s"
                         % short(value))
    if not 0 < seconds <= MAX_TIMEOUT_SECONDS:  # NaN too
        raise InvalidJob("timeout must be more than 0 and at most %d seconds (a year), not %s"
                         % (MAX_TIMEOUT_SECONDS, short(value)))
    return seconds


def expires_at(value: object, *, now: datetime, due: datetime, use_tz: bool) -> datetime:
    """The moment of ``expires`` (a datetime, or seconds/timedelta from ``now``; never
    ``None``: an unset ``expires`` has no moment), after ``now`` and after the due time
    ``due``."""
    if isinstance(value, datetime):
        moment = validation.stored_time(validation.check_at(value, use_tz, "expires"),
                                        use_tz, "expires")
    elif isinstance(value, (int, float, timedelta)) and not isinstance(value, bool):
        moment = now + timedelta(seconds=validation.delay_seconds(value, "expires: seconds"))
    else:
        raise InvalidJob("expires must be a datetime, or seconds (int/float) or a timedelta "
                         "from now, not %s" % short(value))
    if moment <= now:
        raise InvalidJob("expires=%s is not after now (%s): the job could never run"
                         % (moment.isoformat(), now.isoformat()))
    if moment <= due:
        raise InvalidJob("expires=%s is not after the job's due time %s: it could never run"
                         % (moment.isoformat(), due.isoformat()))
    return moment


def retry_on_paths(value: object) -> tuple[str, ...]:
    """Exception classes or dotted paths -> their dotted paths (the row's ``retry_on``;
    ``_own`` never passes an unset one)."""
    if isinstance(value, StoredPaths):
        if problem := retry_on_problem(list(value)):
            raise InvalidJob("retry_on: %s" % problem)
        return tuple(value)
    items = [value] if isinstance(value, (str, type)) else value
    if not isinstance(items, (list, tuple)):
        raise InvalidJob("retry_on must be exception classes or their dotted paths (a list or "
                         "tuple), not %s" % short(value))
    if len(items) > MAX_RETRY_ON:
        raise InvalidJob("retry_on: at most %d exception classes, not %d"
                         % (MAX_RETRY_ON, len(items)))
    paths = []
    for item in items:
        why = path_problem(item) if isinstance(item, str) else "not an exception class"
        if isinstance(item, type) and issubclass(item, BaseException):
            paths.append(type_path(item))
        elif why:
            raise InvalidJob("retry_on: %s is %s; give exception classes or dotted paths "
                             "such as 'requests.exceptions.Timeout'" % (short(item), why))
        else:
            paths.append(type_path(exception_class(item)))
    if problem := retry_on_problem(paths):
        raise InvalidJob("retry_on: %s" % problem)
    return tuple(dict.fromkeys(paths))


class StoredPaths(tuple[str, ...]):
    """A row's ``retry_on`` given again (``requeue``): paths its writer resolved, checked
    as text (``retry_on_problem``), not imported again."""

    __slots__ = ()


def exception_class(path: str) -> type[BaseException]:
    """The exception class a ``retry_on`` path names: the longest importable module of
    its head (the caller's code named it, as a setting's dotted path), then the rest as
    names of classes in it (``app.models.Order.DoesNotExist``)."""
    where = "retry_on: %s names no exception class" % short(path)
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            found: object = importlib.import_module(module_name)
            break
        except ModuleNotFoundError as exc:
            if cut > 1 and (module_name + ".").startswith("%s." % exc.name):
                continue  # no such module (not one it imports): a class further up
            error: BaseException = exc
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the module's own error
            error = exc
        raise InvalidJob("%s: module %r cannot be imported (%s: %s)"
                         % (where, module_name, type(error).__name__, error)) from None
    for i in range(cut, len(parts)):
        if i > cut and not isinstance(found, type):
            hint = (": give a class by the path of the module it is defined in"
                    if isinstance(found, ModuleType) else "")
            raise InvalidJob("%s: %r is a %s, not a class%s"
                             % (where, ".".join(parts[:i]), type(found).__name__, hint))
        found = getattr(found, parts[i], None)
        if found is None:
            raise InvalidJob("%s: %s %r has no %r" % (
                where, "module" if i == cut else "class", ".".join(parts[:i]), parts[i]))
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise InvalidJob("%s: it is %s" % (where, "a class, not an exception" if isinstance(
            found, type) else "a " + type(found).__name__))
    return found


def path_problem(path: str) -> str | None:
    """Why ``path`` is not the dotted path of a class (``module.Class``), or ``None``."""
    if not validation.utf8_ok(path) or not 3 <= len(path) <= validation.MAX_PATH:
        return "not a dotted path of 3 to %d characters" % validation.MAX_PATH
    parts = path.split(".")
    dotted = len(parts) >= 2 and all(part.isidentifier() for part in parts)
    return None if dotted else "not a dotted path (module.Class)"


def retry_on_problem(paths: list[Any]) -> str | None:
    """What is wrong with a stored ``retry_on`` list (``payloads`` reads rows with it)."""
    if len(paths) > MAX_RETRY_ON:
        return "at most %d exception classes, not %d" % (MAX_RETRY_ON, len(paths))
    bad = [p for p in paths if not isinstance(p, str) or path_problem(p)]
    return "not dotted paths: %s" % short(bad) if bad else None


def check_on_conflict(on_conflict: object, key: object) -> None:
    """``on_conflict`` one of ``ON_CONFLICT``, and other than ``keep`` only with a key."""
    if not isinstance(on_conflict, str) or on_conflict not in ON_CONFLICT:
        raise InvalidJob("on_conflict=%s: use 'keep' (the default: the key's first job "
                         "stands, forever), 'replace' (the key's pending job is cancelled, "
                         "the new one takes the key) or 'drop' (nothing is scheduled while "
                         "the key's job is pending or running)" % short(on_conflict))
    if on_conflict != KEEP and key is None:
        raise InvalidJob("on_conflict=%r needs a key: it says what a job with the same key "
                         "does, and this call gives none (key=None)" % on_conflict)


def parent_ids(after: object) -> list[str]:
    """The ids ``after=`` names (``JobHandle`` objects or job ids), in order, once each;
    ``InvalidJob`` for anything else (a string with NUL or a lone surrogate too: no
    database is asked it)."""
    if after is None:
        return []
    if isinstance(after, Mapping | bytes | bytearray):  # not a list of ids: refused whole
        raise InvalidJob("after= takes JobHandle objects or job ids; got %s"
                         % short(after))
    if isinstance(after, str) or not hasattr(after, "__iter__"):
        after = [after]
    out: dict[str, None] = {}
    for item in after:
        job_id = item if isinstance(item, str) else getattr(item, "id", None)
        if not validation.askable_id(job_id) or not job_id or len(job_id) > 26:
            raise InvalidJob("after= takes JobHandle objects or job ids; got %r" % (item,))
        out[job_id] = None
    return list(out)


def run_on_failure(after_failure: object) -> bool:
    if isinstance(after_failure, str) and after_failure in AFTER_FAILURE:
        return AFTER_FAILURE[after_failure]
    raise InvalidJob("after_failure=%r: use 'cancel' (the default: a parent that ends "
                     "dead, cancelled or expired cancels the job) or 'run'" % (after_failure,))


def check_key(key: object) -> None:
    if not isinstance(key, str) or not key:
        raise InvalidJob("key must be a non-empty string, not %s" % short(key))
    validation.check_text(key, "key")
    if not key.isprintable() and _CONTROL.search(key):
        raise InvalidJob("key %s contains control characters (PostgreSQL cannot store NUL; "
                         "none belongs in a key)" % short(key))
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidJob("key must be at most %d characters, not %d" % (MAX_KEY_LENGTH, len(key)))


def check_group(group: object) -> str:
    """A group id (``group=``): a string of 1 to ``MAX_GROUP`` characters, no control
    characters (the separator of Redis's group index is one: docs/groups.md) and no line
    breaks (a group id is printed in log lines, ``delayq_status`` and the admin)."""
    if not isinstance(group, str) or not 1 <= len(group) <= MAX_GROUP:
        raise InvalidJob("group must be a string of 1 to %d characters, not %s"
                         % (MAX_GROUP, short(group)))
    validation.check_text(group, "group")
    if _CONTROL.search(group) or _LINE_BREAK.search(group):
        raise InvalidJob("group %s contains control characters or line breaks" % short(group))
    return group


def check_max_attempts(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        raise InvalidJob("max_attempts must be an integer from 1 to %d, got %s"
                         % (MAX_ATTEMPTS, short(value)))
    return value


def check_backoff(backoff: object) -> None:
    if why := backoff_mod.validate(backoff):
        raise InvalidJob("backoff %s is not valid: %s" % (short(backoff), why))


# The options a periodic schedule sets: the keys of a definition of DELAYQ["SCHEDULES"] and
# the ``Schedule`` model's fields of the same name (core/conf.py, core/periodic.py),
# each with the value that leaves it unset (the default queue, priority 0, no group, the
# function's own ``atomic``) and its check of a definition (a bool one: a flag, True or
# False; ``queue``: ``JobOptions.check``'s, against DELAYQ["QUEUES"], by ``manage.py check``).
SCHEDULES: dict[str, tuple[Any, Callable[[Any], object] | None]] = {
    "queue": ("", None), "priority": (0, check_priority), "group": ("", check_group),
    "atomic": (False, None)}
