"""Run-time options of a job, checked at ``schedule()``: priority, time limit, expiry,
retry_on; and the job's arguments against its function's signature.

Each check raises ``InvalidJob`` naming the option and the bad value:

* ``priority``: an integer from -100 to 100 (``bool`` refused); among the due jobs of a
  queue, higher runs first;
* ``timeout``: seconds > 0 (a number or a ``timedelta``, at most ``MAX_TIMEOUT_SECONDS``),
  or ``None`` for the queue's (``QUEUE_OPTIONS``) or the global ``JOB_TIMEOUT_SECONDS``;
* ``expires``: an aware datetime (naive only without ``USE_TZ``), or seconds / a
  ``timedelta`` from now; it must be after now and after the job's due time (else it could
  never run). A job not started by then ends ``expired``;
* ``retry_on``: exception classes or their dotted paths (one, or a list/tuple), stored as
  dotted paths; only those (and their subclasses) are retried. ``[]`` retries nothing;
* ``atomic``: ``True`` or ``False`` (``None``: the function's default, ``True`` for a
  function decorated with ``atomic_job``). An atomic job runs in one transaction with the
  write of its success (``worker/atomic.py``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from django_delayq.core import registry, validation
from django_delayq.exceptions import InvalidJob, type_path

MIN_PRIORITY, MAX_PRIORITY = -100, 100
MAX_TIMEOUT_SECONDS = 365 * 24 * 3600.0  # a year
MAX_RETRY_ON = 50  # exception classes in one retry_on


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """Checked options, as the row stores them."""

    priority: int = 0
    timeout: float | None = None
    expires_at: datetime | None = None
    retry_on: tuple[str, ...] | None = None
    atomic: bool = False

    def columns(self) -> dict[str, Any]:
        """The row's values (``retry_on`` a list: a JSON column)."""
        return dict(priority=self.priority, timeout=self.timeout, expires_at=self.expires_at,
                    retry_on=None if self.retry_on is None else list(self.retry_on),
                    atomic=self.atomic)


ATOMIC_MARK = "delayq_atomic"  # set on a function by ``atomic_job``


def atomic_job(fn: Any) -> Any:
    """Decorator: every job of ``fn`` is atomic unless scheduled with ``atomic=False``.

    ``fn`` is returned as it is, marked; on a Django ``Task`` the function it wraps is
    marked. The mark is read when a job is scheduled and stored on its row."""
    setattr(getattr(fn, "func", fn), ATOMIC_MARK, True)
    return fn


def check_atomic(value: Any, path: str) -> bool:
    """``atomic=``: a bool, or ``None`` for the default of the function at ``path``. An
    ``async def`` function cannot be atomic: its database calls run on other threads'
    connections, outside the transaction of its attempt."""
    func = registry.job_object(path)
    func = getattr(func, "func", func)  # a Django Task: the function it wraps
    if value is None:
        value = getattr(func, ATOMIC_MARK, False) is True
    elif not isinstance(value, bool):
        raise InvalidJob("atomic must be True, False or None (the function's default), not %s"
                         % validation.short(value))
    if value and inspect.iscoroutinefunction(func):
        raise InvalidJob("atomic=True: %s is an async def function; its database calls run "
                         "on other threads, outside the transaction of its attempt (make it "
                         "a plain function)" % path)
    return value


def check_priority(value: Any) -> int:
    if (isinstance(value, bool) or not isinstance(value, int)
            or not MIN_PRIORITY <= value <= MAX_PRIORITY):
        raise InvalidJob("priority must be an integer from %d to %d, not %s"
                         % (MIN_PRIORITY, MAX_PRIORITY, validation.short(value)))
    return value


def timeout_seconds(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value) if abs(value) < 1e300 else math.inf
    else:
        raise InvalidJob("timeout must be seconds (int/float) > 0, a timedelta or None, not %s"
                         % validation.short(value))
    if not 0 < seconds <= MAX_TIMEOUT_SECONDS:  # NaN too
        raise InvalidJob("timeout must be more than 0 and at most %d seconds (a year), not %s"
                         % (MAX_TIMEOUT_SECONDS, validation.short(value)))
    return seconds


def expires_at(value: Any, *, now: datetime, due: datetime, use_tz: bool) -> datetime | None:
    """The moment of ``expires`` (a datetime, or seconds/timedelta from ``now``), after
    ``now`` and after the due time ``due``."""
    if value is None:
        return None
    if isinstance(value, datetime):
        try:
            moment = validation.check_at(value, use_tz)
        except InvalidJob as exc:
            raise InvalidJob(str(exc).replace("at=", "expires=", 1)) from None
        if moment.tzinfo is not None and now.tzinfo is None:  # USE_TZ = False
            moment = timezone.make_naive(moment)
    elif isinstance(value, (int, float, timedelta)) and not isinstance(value, bool):
        try:
            seconds = validation.delay_seconds(value)
        except InvalidJob as exc:
            raise InvalidJob("expires: %s" % str(exc).replace("delay", "seconds")) from None
        moment = now + timedelta(seconds=seconds)
    else:
        raise InvalidJob("expires must be a datetime, or seconds (int/float) or a timedelta "
                         "from now, not %s" % validation.short(value))
    if moment <= now:
        raise InvalidJob("expires=%s is not after now (%s): the job could never run"
                         % (moment.isoformat(), now.isoformat()))
    if moment <= due:
        raise InvalidJob("expires=%s is not after the job's due time %s: it could never run"
                         % (moment.isoformat(), due.isoformat()))
    return moment


def retry_on_paths(value: Any) -> tuple[str, ...] | None:
    """Exception classes or dotted paths -> their dotted paths (the row's ``retry_on``)."""
    if value is None:
        return None
    items = [value] if isinstance(value, (str, type)) else value
    if not isinstance(items, (list, tuple)):
        raise InvalidJob("retry_on must be exception classes or their dotted paths (a list or "
                         "tuple), not %s" % validation.short(value))
    paths = []
    for item in items:
        if isinstance(item, type) and issubclass(item, BaseException):
            paths.append(type_path(item))
        elif isinstance(item, str) and not path_problem(item):
            paths.append(item)
        else:
            why = path_problem(item) if isinstance(item, str) else "not an exception class"
            raise InvalidJob("retry_on: %s is %s; give exception classes or dotted paths "
                             "such as 'requests.exceptions.Timeout'"
                             % (validation.short(item), why))
    if problem := retry_on_problem(paths):
        raise InvalidJob("retry_on: %s" % problem)
    return tuple(dict.fromkeys(paths))


def path_problem(path: str) -> str | None:
    """Why ``path`` is not the dotted path of a class (``module.Class``), or ``None``."""
    if not validation.utf8_ok(path) or not 3 <= len(path) <= validation.MAX_PATH:
        return "not a dotted path of 3 to %d characters" % validation.MAX_PATH
    parts = path.split(".")
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        return "not a dotted path (module.Class)"
    return None


def retry_on_problem(paths: list[Any]) -> str | None:
    """What is wrong with a stored ``retry_on`` list (``payloads`` reads rows with it)."""
    if len(paths) > MAX_RETRY_ON:
        return "at most %d exception classes, not %d" % (MAX_RETRY_ON, len(paths))
    bad = [p for p in paths if not isinstance(p, str) or path_problem(p)]
    return "not dotted paths: %s" % validation.short(bad) if bad else None


# -- the arguments against the function's signature ---------------------------------------

def check_arguments(path: str, args: Any, kwargs: dict[str, Any]) -> None:
    """``InvalidJob`` when ``fn(*args, **kwargs)`` would fail to bind (a missing or an
    unexpected argument). A Django ``@task`` is checked against the function it wraps (its
    ``TaskContext`` excluded). Paths that passed ``registry.check_schedulable`` only."""
    signature = registry.signature(path)
    if signature is not None:
        bind(signature, path, args, kwargs)


def check_no_clash(path: str, names: list[str]) -> None:
    """``schedule(fn, ..., timeout=5)`` when ``fn`` itself takes ``timeout``: the value would
    silently become the job's option instead of the function's argument (the meaning it had
    before these options existed), so ``InvalidJob`` says how to pass either."""
    signature = registry.signature(path)
    if signature is None:
        return
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    clash = [n for n in names if n in signature.parameters
             and signature.parameters[n].kind in named]
    if clash:
        option = clash[0]
        raise InvalidJob(
            "%s takes an argument named %r, and schedule(..., %s=...) sets the job's option "
            "of that name, not the argument: pass the argument with job(fn).schedule(..., "
            "%s=...) (every keyword goes to the function) and the option with "
            "job(fn).using(%s=...)" % (path, option, option, option, option))


class Binder:
    """``bind`` for many jobs of one function (``schedule_many``): plain positional
    arguments of a plain signature are checked by counting; anything else binds."""

    def __init__(self, path: str, signature: inspect.Signature) -> None:
        self.path, self.signature = path, signature
        params = list(signature.parameters.values())
        kinds = {p.kind for p in params}
        self.anything = kinds == {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
        plain = kinds <= {inspect.Parameter.POSITIONAL_OR_KEYWORD}
        required = sum(p.default is inspect.Parameter.empty for p in params)
        self.counts = (required, len(params)) if plain else None

    def check(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        if self.anything:
            return
        if self.counts is not None and not kwargs and (
                self.counts[0] <= len(args) <= self.counts[1]):
            return
        bind(self.signature, self.path, args, kwargs)


def bind(signature: inspect.Signature, path: str, args: Any, kwargs: dict[str, Any]) -> None:
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidJob("the arguments do not match %s%s: %s"
                         % (path, _plain(signature), exc)) from None


def _plain(signature: inspect.Signature) -> str:
    """The parameters without annotations: ``(a, b=1, *args)``."""
    empty = inspect.Parameter.empty
    params = [p.replace(annotation=empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=params, return_annotation=empty))
