"""What every way of scheduling shares (``api``, ``bulk``): the options of a call checked
once, each job's due time and run-time options, its row values, the eager hook, and the
send to Redis after commit."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from redis.exceptions import RedisError

from django_delayq.core import ids, options, registry, validation
from django_delayq.core.conf import Settings
from django_delayq.core.connection import get_engine
from django_delayq.engine import NewJob
from django_delayq.exceptions import InvalidJob

logger = logging.getLogger(__name__)

MAX_QUEUE_NAME = 100  # the row's ``queue`` column
KEEP, REPLACE, DROP = "keep", "replace", "drop"  # on_conflict= (core/dedup.py)
ON_CONFLICT = (KEEP, REPLACE, DROP)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """One job of ``schedule_many`` (and of ``schedule_spec``). The run-time options left
    ``None`` take the call's (``schedule_many(..., priority=...)``), else the defaults."""

    args: Sequence[Any] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    delay: float | timedelta | None = None
    at: datetime | None = None
    key: str | None = None
    priority: int | None = None
    timeout: float | timedelta | None = None
    expires: datetime | float | timedelta | None = None
    retry_on: Any = None
    atomic: bool | None = None  # None: the function's default (options.atomic_job)
    after: Any = None  # parents: JobHandle objects or ids (core/workflows.py)
    after_failure: str = "cancel"
    on_conflict: str = KEEP  # what its key does with the key's earlier job: core/dedup.py


@dataclass(frozen=True, slots=True, kw_only=True)
class Common:
    """The options of one call, checked: the same for each of its jobs."""

    path: str
    queue: str
    max_attempts: int
    backoff: Any
    priority: int = 0
    timeout: float | None = None
    expires: Any = None  # checked as to its type; its moment depends on each job's due time
    retry_on: tuple[str, ...] | None = None
    atomic: bool = False  # the call's, else the function's default
    use_tz: bool = True


def check_queue(queue: Any, s: Settings, any_queue: bool) -> str:
    """A queue of ``DELAYQ["QUEUES"]``; with ``any_queue`` (a Tasks backend whose QUEUES is
    empty) any storable name, served by a worker started with ``--queues``."""
    if isinstance(queue, str) and queue in s.queues:
        return queue
    if not any_queue:
        raise InvalidJob("unknown queue %r; DELAYQ['QUEUES'] is %r" % (queue, list(s.queues)))
    if not isinstance(queue, str) or not_a_queue_name(queue):
        raise InvalidJob("queue %s is not a queue name: 1 to %d printable characters without "
                         "braces, not ending in #<digits> (a sharded queue's data set names)"
                         % (validation.short(queue), MAX_QUEUE_NAME))
    return queue


def not_a_queue_name(queue: str) -> bool:
    """Whether a queue ``DELAYQ["QUEUES"]`` does not list cannot be one: empty, too long,
    not printable, with braces (a hash tag), or named like shard i of another queue
    (``q#i``, engine/shard_map.py): its jobs would land in that shard's keys."""
    return (not queue or len(queue) > MAX_QUEUE_NAME or not queue.isprintable()
            or "{" in queue or "}" in queue or re.fullmatch(r".+#[0-9]+", queue) is not None)


def common(fn: Any, s: Settings, *, queue: str | None, max_attempts: Any, backoff: Any,
           use_tz: bool, now: datetime, any_queue: bool = False, priority: Any = None,
           timeout: Any = None, expires: Any = None, retry_on: Any = None,
           atomic: Any = None) -> Common:
    validation.check_text(fn, "the callable path")
    path = registry.path_of(fn)
    registry.check_schedulable(path)
    queue = check_queue(s.default_queue if queue is None else queue, s, any_queue)
    validation.check_backoff(backoff)
    if max_attempts is None:
        is_list = isinstance(backoff, (list, tuple))
        max_attempts = len(backoff) + 1 if is_list else s.default_max_attempts
    validation.check_max_attempts(max_attempts)
    if isinstance(backoff, tuple):
        backoff = list(backoff)
    options.expires_at(expires, now=now, due=now, use_tz=use_tz)
    return Common(path=path, queue=queue, max_attempts=max_attempts, backoff=backoff,
                  priority=0 if priority is None else options.check_priority(priority),
                  timeout=options.timeout_seconds(timeout), expires=expires,
                  retry_on=options.retry_on_paths(retry_on),
                  atomic=options.check_atomic(atomic, path), use_tz=use_tz)


def check_on_conflict(on_conflict: Any, key: Any) -> None:
    """``on_conflict`` one of ``ON_CONFLICT``, and other than ``keep`` only with a key."""
    if not isinstance(on_conflict, str) or on_conflict not in ON_CONFLICT:
        raise InvalidJob("on_conflict=%s: use 'keep' (the default: the key's first job "
                         "stands, forever), 'replace' (the key's pending job is cancelled, "
                         "the new one takes the key) or 'drop' (nothing is scheduled while "
                         "the key's job is pending or running)" % validation.short(on_conflict))
    if on_conflict != KEEP and key is None:
        raise InvalidJob("on_conflict=%r needs a key: it says what a job with the same key "
                         "does, and this call gives none (key=None)" % on_conflict)


def job_id(queue: str, key: Any, on_conflict: Any) -> str:
    """A keyed job's id, its key and ``on_conflict`` checked: derived from the key for
    ``keep`` (same key, same id), fresh for ``replace`` and ``drop``."""
    check_on_conflict(on_conflict, key)
    if key is None:
        return ids.new_id()
    validation.check_key(key)
    return ids.id_for_key(queue, key) if on_conflict == KEEP else ids.new_id()


def when(delay: Any, at: Any, use_tz: bool) -> tuple[datetime | None, float]:
    """The due time checked: ``(at, 0)``, or ``(None, delay in seconds)``."""
    if delay is not None and at is not None:
        raise InvalidJob("pass delay or at, not both (delay=%r, at=%r)" % (delay, at))
    if at is not None:
        return validation.check_at(at, use_tz), 0.0
    return None, validation.delay_seconds(0 if delay is None else delay)


def run_options(c: Common, spec: JobSpec, now: datetime, due: datetime) -> options.RunOptions:
    """The job's own options, else the call's."""
    expires = c.expires if spec.expires is None else spec.expires
    return options.RunOptions(
        priority=c.priority if spec.priority is None else options.check_priority(spec.priority),
        timeout=c.timeout if spec.timeout is None else options.timeout_seconds(spec.timeout),
        expires_at=options.expires_at(expires, now=now, due=due, use_tz=c.use_tz),
        retry_on=c.retry_on if spec.retry_on is None else options.retry_on_paths(spec.retry_on),
        atomic=c.atomic if spec.atomic is None else options.check_atomic(spec.atomic, c.path))


def build(c: Common, spec: JobSpec, s: Settings, now: datetime) -> tuple[dict[str, Any], NewJob]:
    """One job's row values and its entry for Redis (``schedule``; ``schedule_many`` uses
    ``bulk``, with the same checks)."""
    args, kwargs = list(spec.args), dict(spec.kwargs)
    _, _, size = validation.encode_args(args, kwargs)
    options.check_arguments(c.path, args, kwargs)
    at, seconds = when(spec.delay, spec.at, c.use_tz)
    if at is not None:
        run_at, at_ms, delay_ms = at, validation.at_ms(at), 0
    else:
        run_at, at_ms, delay_ms = now + timedelta(seconds=seconds), None, int(seconds * 1000)
    opts = run_options(c, spec, now, run_at)
    if spec.key is None and spec.on_conflict == KEEP:
        new_id = ids.new_id()
    else:
        new_id = job_id(c.queue, spec.key, spec.on_conflict)
    validation.check_size(size + validation.payload_head_size(c.path, c.max_attempts, c.backoff),
                          s.max_payload_bytes)
    row = dict(id=new_id, queue=c.queue, callable_path=c.path, args=args, kwargs=kwargs,
               key=spec.key, run_at=run_at, scheduled_for=run_at, created_at=now,
               updated_at=now, max_attempts=c.max_attempts, backoff=c.backoff, **opts.columns())
    # The payload stays in the row: Redis gets the id, the due time and the priority.
    return row, NewJob(id=new_id, at_ms=at_ms, delay_ms=delay_ms, priority=opts.priority)


_eager: list[Callable[[str], object]] = []


def set_eager_runner(runner: Callable[[str], object]) -> None:
    """What runs a job inline when ``DELAYQ["EAGER"]`` is on: ``django_delayq.testing``
    plugs its runner in when the app is ready (a hook: this layer never imports it)."""
    _eager[:] = [runner]


def eager_runner() -> Callable[[str], object]:
    if not _eager:
        raise ImproperlyConfigured("DELAYQ['EAGER'] is on but no eager runner is set: is "
                                   "'django_delayq' in INSTALLED_APPS?")
    return _eager[0]


def enqueue_or_outbox(queue: str, jobs: list[NewJob]) -> None:
    """Send committed jobs to Redis; when it is down, their rows wait for the reconciler."""
    try:
        get_engine().enqueue(queue, jobs)
    except RedisError as exc:
        logger.warning("Redis unavailable; %d job(s) of queue %r stay in the outbox for the "
                       "reconciler: %s", len(jobs), queue, exc)


def after_commit(using: str, fn: Callable[[], object]) -> None:
    transaction.on_commit(fn, using=using, robust=True)
