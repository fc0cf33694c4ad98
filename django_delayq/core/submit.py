"""One job's row, once its options are checked (``options.JobOptions.check``): its values
and its entry for Redis; and the hook every way of scheduling shares (eager runs). What
runs at commit, and the send to Redis then, is ``commit_batch``'s."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from django_delayq.core import options, validation
from django_delayq.engine.outcomes import NewJob


def build(c: options.Checked, args: Sequence[Any], kwargs: dict[str, Any],
          max_payload: int) -> tuple[dict[str, Any], NewJob]:
    """One job's row values and its entry for Redis (``schedule``; ``schedule_many`` uses
    ``bulk``, with the same checks)."""
    args, kwargs = list(args), dict(kwargs)
    _, _, size = validation.encode_args(args, kwargs)
    options.check_arguments(c.path, args, kwargs)
    run_at, at_ms, delay_ms = c.due()
    columns = c.columns(run_at)
    new_id = c.job_id()
    validation.check_size(size + validation.payload_head_size(c.path, c.max_attempts, c.backoff),
                          max_payload)
    row = dict(id=new_id, queue=c.queue, callable_path=c.path, args=args, kwargs=kwargs,
               key=c.key, run_at=run_at, scheduled_for=run_at, created_at=c.now,
               updated_at=c.now, max_attempts=c.max_attempts, backoff=c.backoff, **columns)
    # The payload stays in the row: Redis gets the id, the due time, priority and group.
    return row, NewJob(id=new_id, at_ms=at_ms, delay_ms=delay_ms, priority=c.priority,
                       group=c.group)


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

