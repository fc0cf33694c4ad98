"""One job's row, once its options are checked (``options.JobOptions.check``): its values
and its entry for Redis. What runs at commit (the send to Redis, or eager mode's runs) is
``commit_batch``'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
