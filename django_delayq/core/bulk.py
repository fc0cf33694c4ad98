"""``schedule_many``'s fast path: validate each spec, then one INSERT per 1,000 rows and
one Redis call per 1,000 jobs, with every value encoded once.

The row's ``args``/``kwargs`` JSON is encoded once (its size in UTF-8 bytes checked as the
compact payload array's); every check is ``validation``'s, shared with ``schedule()`` and
the Spark path; the arguments are bound to the function's signature. Redis gets ids, due
times and priorities only; constant columns are adapted once per
call; no model instances are made.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django_delayq.core import ids, options, registry, rows, submit, validation
from django_delayq.engine import NewJob
from django_delayq.exceptions import InvalidJob


class Batch:
    """Rows and Redis entries of one ``schedule_many`` call (one queue, one callable)."""

    def __init__(self, using: str, *, common: submit.Common, now: datetime,
                 max_payload: int) -> None:
        self.common, self.now, self.max_payload = common, now, max_payload
        self.queue, self.use_tz = common.queue, common.use_tz
        self.writer = rows.RowWriter(using, queue=common.queue, path=common.path,
                                     max_attempts=common.max_attempts, backoff=common.backoff,
                                     now=now)
        self._fixed = validation.payload_head_size(common.path, common.max_attempts,
                                                   common.backoff)
        signature = registry.signature(common.path)
        self._binder = None if signature is None else options.Binder(common.path, signature)
        # The call's options, as row columns: a spec without options of its own gets them.
        self._plain = common.expires is None
        self._columns = {"priority": common.priority, "timeout": common.timeout,
                         "retry_on": common.retry_on, "atomic": common.atomic}
        self.rows: list[list[Any]] = []
        self.jobs: list[NewJob] = []
        self.ids: list[str] = []
        self.keyed: list[str] = []

    def add(self, spec: submit.JobSpec) -> None:
        args, kwargs = list(spec.args), dict(spec.kwargs)
        args_json, kwargs_json, size = validation.encode_args(args, kwargs)
        if self._binder is not None:
            self._binder.check(args, kwargs)
        run_at, at_ms, delay_ms = self._due(spec.delay, spec.at)
        if spec.key is None:
            job_id = ids.new_id()
        else:
            validation.check_key(spec.key)
            job_id = ids.id_for_key(self.queue, spec.key)
            self.keyed.append(job_id)
        validation.check_size(self._fixed + size, self.max_payload)
        columns, priority = self._options(spec, run_at)
        if run_at.tzinfo is not None and run_at.tzinfo is not UTC:
            run_at = run_at.astimezone(UTC)
        columns["scheduled_for"] = run_at
        self.rows.append(self.writer.row(job_id, spec.key, args_json, kwargs_json, run_at,
                                         columns))
        self.jobs.append(NewJob(id=job_id, at_ms=at_ms, delay_ms=delay_ms,  # payload: the row
                                priority=priority))
        self.ids.append(job_id)

    def _due(self, delay: Any, at: Any) -> tuple[datetime, int | None, int]:
        """``(run_at, at_ms, delay_ms)`` of one spec."""
        if delay is not None and at is not None:
            raise InvalidJob("pass delay or at, not both (delay=%r, at=%r)" % (delay, at))
        if at is not None:
            run_at = validation.check_at(at, self.use_tz)
            return run_at, validation.at_ms(run_at), 0
        seconds = validation.delay_seconds(0 if delay is None else delay)
        return self.now + timedelta(seconds=seconds), None, int(seconds * 1000)

    def _options(self, spec: submit.JobSpec, run_at: datetime) -> tuple[dict[str, Any], int]:
        """The row columns of the run-time options, and the priority for Redis."""
        own = (spec.priority, spec.timeout, spec.expires, spec.retry_on, spec.atomic)
        if self._plain and all(value is None for value in own):
            return dict(self._columns), self.common.priority
        opts = submit.run_options(self.common, spec, self.now, run_at)
        columns = opts.columns()
        return columns, opts.priority

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


def build(using: str, specs: Iterable[submit.JobSpec], *, common: submit.Common,
          now: datetime, max_payload: int) -> Batch:
    batch = Batch(using, common=common, now=now, max_payload=max_payload)
    for spec in specs:
        batch.add(spec)
    return batch

