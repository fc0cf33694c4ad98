"""A job's options: one frozen ``JobOptions``, its checks, and what a row stores of them.

``schedule()``, ``schedule_spec()``, ``schedule_many()``, ``job(fn).using()``, the Tasks
backend and periodic schedules all build or carry a ``JobOptions`` (``JobSpec`` is one
with the job's arguments, ``JobCall`` one with its function); ``JobOptions.check`` is
the one place its values are checked, each by its own check (core/option_checks.py), and
returns them resolved (``Checked``). ``None`` means "not given": the call's value, else
the default. Each check raises ``InvalidJob`` naming the option and the bad value:

* ``queue``: one of ``DELAYQ["QUEUES"]`` (default ``DEFAULT_QUEUE``);
* ``delay`` (seconds or a ``timedelta``) or ``at`` (a datetime; an aware one without
  ``USE_TZ``: stored as its wall time in ``TIME_ZONE``), not both: the due time;
* ``key``: an idempotency key (``option_checks.check_key``); ``on_conflict``: what a second
  job of the key does, ``keep`` (the default), ``replace`` or ``drop`` (core/workflows.py);
* ``priority``: an integer from -100 to 100 (``bool`` refused); among the due jobs of a
  queue, higher runs first;
* ``timeout``: seconds > 0 (a number or a ``timedelta``, at most ``MAX_TIMEOUT_SECONDS``),
  or ``None`` for the queue's (``QUEUE_OPTIONS``) or the global ``JOB_TIMEOUT_SECONDS``;
* ``expires``: an aware datetime (naive only without ``USE_TZ``), or seconds / a
  ``timedelta`` from now; it must be after now and after the job's due time (else it could
  never run): ``check`` (so ``using()``) refuses one that no later call could accept, a
  relative one after an ``at`` is checked per job. A job not started by then ends
  ``expired``;
* ``retry_on``: exception classes or their dotted paths (one, or a list/tuple), stored as
  dotted paths; only those (and their subclasses) are retried. ``[]`` retries nothing;
* ``atomic``: ``True`` or ``False`` (``None``: the function's default, ``True`` for a
  function decorated with ``atomic_job``). An atomic job runs in one transaction with the
  write of its success (``worker/atomic.py``);
* ``max_attempts`` (1 to 1000; default ``len(backoff) + 1`` for a list backoff, else
  ``DEFAULT_MAX_ATTEMPTS``) and ``backoff`` (``engine.backoff.validate``); the Tasks
  backend's ``OPTIONS`` set these two and ``group`` (``TASKS``, ``of_tasks``);
* ``group``: the job's group inside its queue (a tenant, a customer: docs/groups.md), a
  string of 1 to 128 characters without control characters; ``None``: no group;
* ``after``: jobs (handles or ids) that must succeed first; ``after_failure``: ``cancel``
  (the default) or ``run`` when one of them fails (core/workflows.py).

The job's arguments are checked here too: ``Checked.arguments`` (``args`` a list or
tuple, ``kwargs`` a dict: a ``JobSpec`` is checked when it is scheduled, not when it is
made; their JSON, the payload's size) and ``check_arguments`` (against the function's
signature).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Self, TypeVar

from django.conf import settings as django_settings
from django.utils import timezone

from django_delayq.core import ids, registry, validation
from django_delayq.core.conf import get_settings
from django_delayq.core.option_checks import (
    KEEP,
    check_backoff,
    check_group,
    check_key,
    check_max_attempts,
    check_on_conflict,
    check_priority,
    expires_at,
    parent_ids,
    retry_on_paths,
    run_on_failure,
    timeout_seconds,
)
from django_delayq.engine.outcomes import NewJob
from django_delayq.exceptions import InvalidJob

T = TypeVar("T")



@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """How and when a job runs, apart from its arguments; ``None``: not given."""

    queue: str | None = None
    delay: float | timedelta | None = None
    at: datetime | None = None
    key: str | None = None
    on_conflict: str = KEEP
    priority: int | None = None
    timeout: float | timedelta | None = None
    expires: datetime | float | timedelta | None = None
    retry_on: Any = None
    atomic: bool | None = None  # None: the function's default (atomic_job)
    max_attempts: int | None = None
    backoff: Any = None
    group: str | None = None  # None: no group (docs/groups.md)
    after: Any = None  # parents: JobHandle objects or ids (core/workflows.py)
    after_failure: str = "cancel"

    def under(self, call: JobOptions) -> Self:
        """These options with ``call``'s where these leave one unset and ``call`` sets it.
        Pairs go together: a job that sets neither ``delay`` nor ``at`` takes both of the
        call's, one without ``key`` its ``key`` and ``on_conflict``, one without ``after``
        its ``after`` and ``after_failure``."""
        changes = {name: value for name in _SINGLE
                   if getattr(self, name) is None and (value := getattr(call, name)) is not None}
        if self.delay is None and self.at is None and (call.delay, call.at) != (None, None):
            changes.update(delay=call.delay, at=call.at)
        if self.key is None and call.key is not None:
            changes.update(key=call.key, on_conflict=call.on_conflict)
        if self.after is None and call.after is not None:
            changes.update(after=call.after, after_failure=call.after_failure)
        return replace(self, **changes) if changes else self

    def given(self) -> list[str]:
        """The options set here that a job function's own arguments may be named like."""
        return [name for name in _CLASH if (value := getattr(self, name)) is not None
                and value is not False and value != _UNSET.get(name)]

    def retries(self) -> tuple[int, Any]:
        """``(max_attempts, backoff)`` checked, as a row stores them (a tuple backoff a list;
        ``max_attempts`` unset: ``len(backoff) + 1`` for a list, else ``DEFAULT_MAX_ATTEMPTS``);
        ``InvalidJob.option`` names the bad one (the Tasks backend's ``OPTIONS`` key)."""
        backoff, max_attempts = self.backoff, self.max_attempts
        named("backoff", check_backoff, backoff)
        if max_attempts is None:
            is_list = isinstance(backoff, (list, tuple))
            max_attempts = len(backoff) + 1 if is_list else get_settings().default_max_attempts
        named("max_attempts", check_max_attempts, max_attempts)
        return max_attempts, list(backoff) if isinstance(backoff, tuple) else backoff

    def check(self, fn: object, *, now: datetime | None = None, any_queue: bool = False,
              clash: bool = False) -> Checked:
        """Every option checked (``InvalidJob`` naming the bad value), resolved for ``fn``.

        ``any_queue``: accept a queue ``DELAYQ["QUEUES"]`` does not list (the Tasks
        backend with ``QUEUES: []``). ``clash``: ``schedule()``, whose keywords share one
        namespace with the function's, refuses an option the function takes as an
        argument (``Binder.refuse_options``)."""
        s = get_settings()
        if now is None:  # Django's now: aware (UTC) exactly when USE_TZ is on
            now = timezone.now()
            use_tz = now.tzinfo is not None
        else:
            use_tz = django_settings.USE_TZ
        validation.check_text(fn, "the callable path")
        path = registry.path_of(fn)
        registry.check_schedulable(path)
        queue = validation.check_queue(s.default_queue if self.queue is None else self.queue,
                                       s.queues, any_queue)
        unset = self.max_attempts is None and self.backoff is None  # DELAYQ's: checked already
        max_attempts, backoff = (s.default_max_attempts, None) if unset else self.retries()
        at, delay_s = validation.when(self.delay, self.at, use_tz)
        if self.expires is not None:  # its moment: per job (``new``); here what holds always
            expires_at(self.expires, now=now, due=_due(at, delay_s, self.expires, now, use_tz),
                       use_tz=use_tz)
        if clash and (binder := registry.binder(path)) is not None and not \
                binder.keywords.isdisjoint(_CLASH) and (names := self.given()):
            binder.refuse_options(names)  # a function taking none of them: nothing to ask
        own = _own(self, path)
        if self.atomic is None:
            own["atomic"] = check_atomic(None, path)
        check_on_conflict(self.on_conflict, self.key)
        if self.key is not None:
            check_key(self.key)
        head = payload_head_size(path, max_attempts, backoff)
        return Checked(path=path, queue=queue, max_attempts=max_attempts,
                       backoff=backoff,
                       key=self.key, on_conflict=self.on_conflict, at=at, delay_s=delay_s,
                       parents=() if self.after is None else tuple(parent_ids(self.after)),
                       run_on_failure=run_on_failure(self.after_failure), now=now,
                       use_tz=use_tz, head=head, **own)


NAMES = frozenset(f.name for f in fields(JobOptions))
_PAIRED = ("delay", "at", "key", "on_conflict", "after", "after_failure")
_SINGLE = tuple(f.name for f in fields(JobOptions) if f.name not in _PAIRED)
# schedule()'s options a job function's arguments may be named like, and their defaults.
_CLASH = ("priority", "timeout", "expires", "retry_on", "atomic", "group", "after",
          "on_conflict", "after_failure")
_UNSET = {"priority": 0, "on_conflict": KEEP, "after_failure": "cancel"}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec(JobOptions):
    """One job: its arguments and its own options (those it leaves ``None`` take the
    call's: ``schedule_many(..., priority=...)``, ``schedule_spec(..., queue=...)``).
    ``args`` (a list or tuple) and ``kwargs`` (a dict) are checked when it is scheduled
    (``Checked.arguments``), not here."""

    args: Sequence[Any] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def spec_list(specs: object) -> list[JobSpec]:
    """``schedule_many``'s specs as a list, ``InvalidJob`` naming an item that is not a
    ``JobSpec`` (its position and type), or an argument that is no iterable of them."""
    if not isinstance(specs, Iterable):
        raise InvalidJob("schedule_many takes an iterable of JobSpec objects, not %s (%s)"
                         % (validation.short(specs), type(specs).__name__))
    out = list(specs)
    for i, spec in enumerate(out):
        if not isinstance(spec, JobSpec):
            raise InvalidJob("schedule_many takes JobSpec objects: item %d is %s (%s)"
                             % (i, validation.short(spec), type(spec).__name__))
    return out


def one_by_one(specs: list[JobSpec], alone: list[bool]) -> bool:
    """Whether ``schedule_many`` schedules every spec one at a time, in order: one has
    another ``on_conflict`` (a later spec replaces an earlier one of its key), or a spec
    alone shares its key with one of the batch (the key's first spec stands)."""
    if any(spec.on_conflict != KEEP for spec in specs):
        return True
    keys = {spec.key for spec, a in zip(specs, alone) if a and spec.key is not None}
    return bool(keys) and any(spec.key in keys for spec, a in zip(specs, alone) if not a)


def _due(at: datetime | None, delay_s: float, expires: object, now: datetime,
         use_tz: bool) -> datetime:
    """The due time ``expires`` is checked against before a job's own (``check``): ``now``
    plus the delay, or ``at``; ``now`` for a relative expiry with an ``at``, whose order
    depends on when the job is scheduled (``using()`` may come long before)."""
    if at is None:
        return now + timedelta(seconds=delay_s)
    return validation.stored_time(at, use_tz) if isinstance(expires, datetime) else now


def _own(o: JobOptions, path: str) -> dict[str, Any]:
    """The run-time options ``o`` sets, checked (``atomic`` of ``path``'s function)."""
    return {name: check_atomic(value, path) if check is None else check(value)
            for name, check in _CHECKS if (value := getattr(o, name)) is not None}


@dataclass(slots=True, kw_only=True)
class Checked:
    """A call's options, checked and resolved: what its jobs' rows store. Not changed
    once made (``over`` returns a copy); not frozen, since one is made per ``schedule()``
    and a frozen dataclass's ``__init__`` sets its 18 fields through ``object.__setattr__``
    (2-3 µs a call more)."""

    path: str
    queue: str
    max_attempts: int
    backoff: Any
    priority: int = 0
    timeout: float | None = None
    expires: Any = None
    retry_on: tuple[str, ...] | None = None
    atomic: bool = False
    group: str = ""  # "": no group
    key: str | None = None
    on_conflict: str = KEEP
    at: datetime | None = None  # the due time: ``at``, else ``now`` + ``delay_s``
    delay_s: float = 0.0
    parents: tuple[str, ...] = ()
    run_on_failure: bool = False
    now: datetime
    use_tz: bool = True
    head: int = 0  # UTF-8 bytes of the payload besides the arguments (its size limit)

    def over(self, spec: JobOptions) -> Checked:
        """These options with those ``spec`` sets, checked, in their place: its run-time
        options and its key (a job of ``schedule_many``; its due time: ``new``'s)."""
        own = _own(spec, self.path)
        if spec.key is not None:
            check_key(spec.key)
            own["key"] = spec.key
        return replace(self, **own) if own else self

    def new(self, args: object, kwargs: object, max_payload: int, delay: object = None,
            at: object = None) -> tuple[dict[str, Any], NewJob]:
        """One job of these options, due at ``delay``/``at`` (checked; neither: the due time
        of these options): its row's values (a column left out takes its default, None or
        {}: the INSERT writes it as a literal, core/row_insert.py) and its entry for Redis.
        Its id derives from the key for ``keep`` (same key, same id), else fresh."""
        args, kwargs = self.arguments(args, kwargs, max_payload)
        due, seconds = ((self.at, self.delay_s) if delay is None and at is None
                        else validation.when(delay, at, self.use_tz))
        if due is None:
            at_ms, delay_ms = None, int(seconds * 1000)
            run_at = self.now + timedelta(seconds=seconds)
        else:
            run_at, at_ms = validation.stored_time(due, self.use_tz), validation.at_ms(due)
            delay_ms = 0
        keep = self.key is not None and self.on_conflict == KEEP
        job_id = ids.id_for_key(self.queue, str(self.key)) if keep else ids.new_id()
        row = self.columns()
        row.update(id=job_id, args=args, run_at=run_at, scheduled_for=run_at,
                   created_at=self.now, updated_at=self.now)
        if "expires" in row:  # its moment: after the due time
            row["expires_at"] = expires_at(row.pop("expires"), now=self.now, due=run_at,
                                           use_tz=self.use_tz)
        if kwargs:
            row["kwargs"] = kwargs
        if self.key is not None:
            row["key"] = self.key
        # The payload stays in the row: Redis gets the id, the due time, priority and group.
        return row, NewJob(id=job_id, at_ms=at_ms, delay_ms=delay_ms, priority=self.priority,
                           group=self.group)

    def columns(self) -> dict[str, Any]:
        """What every row of these options stores alike (``new`` adds a job's own values;
        Spark's ``ColumnWriter`` writes these once per batch): the queue, the path, the
        retries, and the run-time options' columns (``priority`` ... ``group``) whose value
        is not the column's default (a row left without one gets that default: the INSERT
        writes it as a literal, core/row_insert.py). ``expires`` as given: ``new`` makes it
        the row's ``expires_at``, a moment after the job's due time."""
        row: dict[str, Any] = {"queue": self.queue, "callable_path": self.path,
                               "max_attempts": self.max_attempts}
        row.update({name: value for name, default in _RUNTIME.items()
                    if (value := getattr(self, name)) != default})
        if "retry_on" in row:  # a list: a JSON column
            row["retry_on"] = list(row["retry_on"])
        if self.backoff is not None:
            row["backoff"] = self.backoff
        return row

    def arguments(self, args: object, kwargs: object,
                  max_payload: int) -> tuple[list[Any], dict[str, Any]]:
        """A job's ``args`` and ``kwargs`` checked, as its row stores them (a list, a dict
        of their own): ``args`` must be a list or tuple and ``kwargs`` a dict, else
        ``InvalidJob`` naming the value (a string, bytes or a dict given as ``args`` is
        refused, not iterated into its characters or keys); their values JSON (string
        keys: ``validation.encode_args``), bound to the function's signature, the payload
        within ``max_payload`` bytes."""
        if not isinstance(args, (tuple, list)):
            raise InvalidJob("args must be a list or tuple of the job's positional arguments, "
                             "not %s (%s)" % (validation.short(args), type(args).__name__))
        if not isinstance(kwargs, dict):
            raise InvalidJob("kwargs must be a dict of the job's keyword arguments (str keys), "
                             "not %s (%s)" % (validation.short(kwargs), type(kwargs).__name__))
        args, kwargs = list(args), dict(kwargs)
        size = validation.encode_args(args, kwargs)[2]
        check_arguments(self.path, args, kwargs)
        validation.check_size(size + self.head, max_payload)
        return args, kwargs


def payload_head_size(path: str, max_attempts: int, backoff: object) -> int:
    """UTF-8 bytes of a payload besides its arguments: ``[path,`` ... ``,{max},{backoff}]``
    (the size limit counts the payload as the compact array ``[path,args,kwargs,...]``)."""
    if backoff is None:  # the same on each call of a job's path
        return _head_size(path, max_attempts)
    return _path_size(path) + 1 + validation.utf8_size(",%d,%s]" % (max_attempts,
                                                                   validation.dumps(backoff)))


@lru_cache(maxsize=256)
def _head_size(path: str, max_attempts: int) -> int:
    return _path_size(path) + 1 + validation.utf8_size(",%d]" % max_attempts)


@lru_cache(maxsize=256)
def _path_size(path: str) -> int:
    """UTF-8 bytes of ``[path,`` (a job's path: the same on each of its calls)."""
    return validation.utf8_size("[" + validation.dumps(path) + ",")


# -- the Tasks backend's OPTIONS ------------------------------------------------------

# The options a Tasks backend's ``OPTIONS`` sets (its keys: these names in upper case), and
# each one's value when ``OPTIONS`` leaves it out: one attempt, as Django's Tasks promise
# ``FAILED`` once the function raised (retries are opt-in, not ``DEFAULT_MAX_ATTEMPTS``).
TASKS: dict[str, Any] = {"max_attempts": 1, "backoff": None, "group": None}


def of_tasks(given: Mapping[str, Any]) -> JobOptions:
    """The options of every task a Tasks backend enqueues, from its ``OPTIONS`` (``given``,
    ``TASKS``), checked as ``schedule()`` checks them, as a row stores them;
    ``InvalidJob.option`` names the bad one. ``None`` is no "DELAYQ's default" here:
    ``max_attempts`` must be given as a number (a task's default is one attempt)."""
    o = JobOptions(**{name: given.get(name.upper(), default) for name, default in TASKS.items()})
    named("max_attempts", check_max_attempts, o.max_attempts)
    max_attempts, backoff = o.retries()
    group = o.group if o.group is None else named("group", check_group, o.group)
    return replace(o, max_attempts=max_attempts, backoff=backoff, group=group)


def named(option: str, check: Callable[[Any], T], value: object) -> T:
    """``check(value)``; its ``InvalidJob`` names ``option`` (``InvalidJob.option``)."""
    try:
        return check(value)
    except InvalidJob as exc:
        exc.option = option
        raise


# -- each option's check -------------------------------------------------------------

ATOMIC_MARK = "delayq_atomic"  # set on a function by ``atomic_job``


def atomic_job(fn: object) -> Any:
    """Decorator: every job of ``fn`` is atomic unless scheduled with ``atomic=False``.

    ``fn`` is returned as it is, marked; on a Django ``Task`` the function it wraps is
    marked. The mark is read when a job is scheduled and stored on its row."""
    setattr(getattr(fn, "func", fn), ATOMIC_MARK, True)
    return fn


def check_atomic(value: object, path: str) -> bool:
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


# -- the arguments: their types, then against the function's signature --------------------

def check_arguments(path: str, args: Sequence[object], kwargs: dict[str, Any]) -> None:
    """``InvalidJob`` when ``fn(*args, **kwargs)`` would fail to bind (a missing or an
    unexpected argument). A Django ``@task`` is checked against the function it wraps (its
    ``TaskContext`` excluded). Paths that passed ``registry.check_schedulable`` only."""
    if (binder := registry.binder(path)) is not None:
        binder.check(args, kwargs)


# The run-time options' checks, in order (``_own``; None: ``check_atomic``, of the function).
_CHECKS: tuple[tuple[str, Callable[[Any], Any] | None], ...] = (
    ("priority", check_priority), ("timeout", timeout_seconds),
    ("expires", lambda value: value),  # its type checked; its moment depends on the due time
    ("retry_on", retry_on_paths), ("atomic", None), ("group", check_group))
# Their values in a ``Checked`` that leaves them unset: the columns' defaults.
_RUNTIME = {f.name: f.default for f in fields(Checked) if f.name in dict(_CHECKS)}
