"""``schedule_many``'s fast path: validate each spec, then one INSERT per 1,000 rows and
one Redis call per 1,000 jobs, with every value encoded once.

The row's ``args``/``kwargs`` JSON is encoded once (its size in UTF-8 bytes checked as the
compact payload array's); every check is ``validation``'s, shared with ``schedule()`` and
the Spark path. Redis gets ids and due times only; constant columns are adapted once per
call; no model instances are made.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django_delayq.core import ids, rows, validation
from django_delayq.engine import NewJob
from django_delayq.exceptions import InvalidJob


class Batch:
    """Rows and Redis entries of one ``schedule_many`` call (one queue, one callable)."""

    def __init__(self, using: str, *, queue: str, path: str, max_attempts: int, backoff: Any,
                 now: datetime, use_tz: bool, max_payload: int) -> None:
        self.queue, self.now, self.use_tz, self.max_payload = queue, now, use_tz, max_payload
        self.writer = rows.RowWriter(using, queue=queue, path=path, max_attempts=max_attempts,
                                     backoff=backoff, now=now)
        self._fixed = validation.payload_head_size(path, max_attempts, backoff)
        self.rows: list[list[Any]] = []
        self.jobs: list[NewJob] = []
        self.ids: list[str] = []
        self.keyed: list[str] = []

    def add(self, args: Any, kwargs: Any, delay: Any, at: Any, key: Any) -> None:
        args_json, kwargs_json, size = validation.encode_args(list(args), dict(kwargs))
        if delay is not None and at is not None:
            raise InvalidJob("pass delay or at, not both (delay=%r, at=%r)" % (delay, at))
        if at is not None:
            run_at = validation.check_at(at, self.use_tz)
            at_ms, delay_ms = validation.at_ms(run_at), 0
        else:
            seconds = validation.delay_seconds(0 if delay is None else delay)
            run_at, at_ms, delay_ms = self.now + timedelta(seconds=seconds), None, int(
                seconds * 1000)
        if key is None:
            job_id = ids.new_id()
        else:
            validation.check_key(key)
            job_id = ids.id_for_key(self.queue, key)
            self.keyed.append(job_id)
        validation.check_size(self._fixed + size, self.max_payload)
        if run_at.tzinfo is not None and run_at.tzinfo is not UTC:
            run_at = run_at.astimezone(UTC)
        self.rows.append(self.writer.row(job_id, key, args_json, kwargs_json, run_at))
        self.jobs.append(NewJob(id=job_id, at_ms=at_ms, delay_ms=delay_ms))  # payload: the row
        self.ids.append(job_id)

    def drop_existing(self, batch_size: int) -> None:
        """Forget keyed jobs that already exist: replaying the same input adds nothing."""
        if not self.keyed:
            return
        existing = self.writer.existing(self.keyed, batch_size)
        if existing:
            keep = [i for i, job in enumerate(self.jobs) if job.id not in existing]
            self.rows = [self.rows[i] for i in keep]
            self.jobs = [self.jobs[i] for i in keep]

    def insert(self, batch_size: int) -> None:
        self.writer.insert(self.rows, ignore_conflicts=bool(self.keyed), batch_size=batch_size)


def build(using: str, specs: Iterable[Any], **options: Any) -> Batch:
    batch = Batch(using, **options)
    for spec in specs:
        batch.add(spec.args, spec.kwargs, spec.delay, spec.at, spec.key)
    return batch

