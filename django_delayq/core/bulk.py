"""``schedule_many``'s fast path: validate each spec, then one INSERT per 1,000 rows and
one Redis call per 1,000 jobs, with every value encoded once.

The row's ``args``/``kwargs`` JSON is encoded once (its size in UTF-8 bytes checked as the
compact payload array's); the call's options are checked once (``JobOptions.check``) and
a spec's own per spec (``Checked.over``), as ``schedule()`` checks them; the arguments are
bound to the function's signature. Redis gets ids, due times and priorities only;
constant columns are adapted once per call; no model instances are made.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC
from typing import Any

from django_delayq.core import ids, options, registry, rows, validation
from django_delayq.engine.outcomes import NewJob


class Batch:
    """Rows and Redis entries of one ``schedule_many`` call (one queue, one callable)."""

    def __init__(self, using: str, specs: Iterable[options.JobSpec], *, call: options.Checked,
                 max_payload: int) -> None:
        self.call, self.max_payload = call, max_payload
        self.writer = rows.RowWriter(using, queue=call.queue, path=call.path,
                                     max_attempts=call.max_attempts, backoff=call.backoff,
                                     now=call.now)
        self._fixed = validation.payload_head_size(call.path, call.max_attempts, call.backoff)
        self._binder = registry.binder(call.path)
        # The call's options, as row columns: a spec without options of its own gets them
        # (None: they depend on each job's due time, through ``expires``).
        self._columns = None if call.expires is not None else call.columns(call.now)
        self.rows: list[list[Any]] = []
        self.jobs: list[NewJob] = []
        self.ids: list[str] = []
        self.keyed: list[str] = []
        for spec in specs:
            self.add(spec)

    def add(self, spec: options.JobSpec) -> None:
        args, kwargs = list(spec.args), dict(spec.kwargs)
        args_json, kwargs_json, size = validation.encode_args(args, kwargs)
        if self._binder is not None:
            self._binder.check(args, kwargs)
        run_at, at_ms, delay_ms = self.call.due(spec.delay, spec.at)
        if spec.key is None:
            job_id = ids.new_id()
        else:
            validation.check_key(spec.key)
            job_id = ids.id_for_key(self.call.queue, spec.key)
            self.keyed.append(job_id)
        validation.check_size(self._fixed + size, self.max_payload)
        job = self.call.over(spec)  # the job's options (its priority and group for Redis)
        if job is self.call and self._columns is not None:  # none of its own: the call's
            columns = dict(self._columns)
        else:  # the row columns of the run-time options
            columns = job.columns(run_at)
        if run_at.tzinfo is not None and run_at.tzinfo is not UTC:
            run_at = run_at.astimezone(UTC)
        columns["scheduled_for"] = run_at
        self.rows.append(self.writer.row(job_id, spec.key, args_json, kwargs_json, run_at,
                                         columns))
        self.jobs.append(NewJob(id=job_id, at_ms=at_ms, delay_ms=delay_ms,  # payload: the row
                                priority=job.priority, group=job.group))
        self.ids.append(job_id)

    def drop_existing(self, batch_size: int) -> None:
        """Forget keyed jobs that already exist: replaying the same input adds nothing."""
        if not self.keyed:
            return
        if existing := self.writer.existing(self.keyed, batch_size):
            keep = [i for i, job in enumerate(self.jobs) if job.id not in existing]
            self.rows = [self.rows[i] for i in keep]
            self.jobs = [self.jobs[i] for i in keep]

    def insert(self, batch_size: int) -> None:
        self.writer.insert(self.rows, ignore_conflicts=bool(self.keyed), batch_size=batch_size)

