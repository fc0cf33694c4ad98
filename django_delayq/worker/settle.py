"""Settling outcomes in Redis (batched ack/nack) and recording them in the audit.

Redis decides first; the audit row follows what Redis accepted. A settlement that
Redis refuses (the lease was lost and the job redelivered) is logged and leaves the
row to the redelivered copy.

A failed attempt is recorded as ``error_type`` (the exception's dotted path), ``error``
(its message) and ``traceback``, on the row (``last_error`` holds the message) and on its
``JobAttempt``. A lease taken back is recorded as ``django_delayq.exceptions.LeaseLost``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

from django_delayq import signals
from django_delayq.core import payloads
from django_delayq.core.conf import Settings
from django_delayq.engine import ClaimedJob, Engine, NackOutcome
from django_delayq.exceptions import LeaseLost, type_path
from django_delayq.models import JobStatus
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.queue_backoff import ERRORS
from django_delayq.worker.runner import Kind, Outcome, ms_to_dt

logger = logging.getLogger(__name__)

LOST_LEASE = "lease expired: the worker running it died or stopped heartbeating"
LEASE_LOST = type_path(LeaseLost)


class Settler:
    def __init__(self, engine: Engine, settings: Settings, audit: AuditWriter,
                 worker_id: str) -> None:
        self.engine = engine
        self.settings = settings
        self.audit = audit
        self.worker_id = worker_id
        self.started_ts = datetime.now(UTC)
        self.processed = 0

    def started(self, job: ClaimedJob) -> None:
        now = datetime.now(UTC)
        self.audit.update(job.id, status=JobStatus.RUNNING, run_at=ms_to_dt(job.due_ms),
                          started_at=now, finished_at=None, attempts=job.token,
                          worker_id=self.worker_id, updated_at=now)
        if signals.wanted(signals.job_started):
            path = _path_of(job)
            signals.send(signals.job_started, job_id=job.id, queue=job.queue, callable_path=path,
                         attempt=job.token, worker_id=self.worker_id,
                         due_at=ms_to_dt(job.due_ms), started_at=now)

    def settle(self, outcomes: list[Outcome]) -> None:
        by_queue: dict[str, list[Outcome]] = {}
        for o in outcomes:
            by_queue.setdefault(o.job.queue, []).append(o)
        for queue, items in by_queue.items():
            wins = [o for o in items if o.kind is Kind.SUCCESS]
            fails = [o for o in items if o.kind is not Kind.SUCCESS]
            acked = self.engine.ack(queue, [(o.job.id, o.job.token) for o in wins])
            nacked = self.engine.nack(
                queue, [(o.job.id, o.job.token, o.retry_delay_ms) for o in fails],
                dead_max=self.settings.dead_max)
            for o, ok in zip(wins, acked):
                if not ok and self.engine.inspect(queue, o.job.id).place == "":
                    # Our ack ran but its reply was lost (the retry was refused), or Redis
                    # lost the job: nobody else owns it. The audit guard on attempts keeps
                    # this from overwriting a later attempt's record.
                    ok = True
                self._record(o, JobStatus.SUCCEEDED if ok else None)
            for o, res in zip(fails, nacked):
                self._record(o, _STATUS_OF.get(res))
        self.processed += len(outcomes)

    def _record(self, o: Outcome, status: JobStatus | None) -> None:
        job = o.job
        if status is None:
            logger.warning("job %s (attempt %d): lease lost before it was settled; the "
                           "redelivered copy owns it now", job.id, job.token)
            return
        fields: dict[str, Any] = dict(
            status=status, started_at=o.started_at, finished_at=o.finished_at,
            attempts=job.token, worker_id=self.worker_id, updated_at=o.finished_at)
        base = dict(job_id=job.id, queue=job.queue, callable_path=o.path)
        if status is JobStatus.SUCCEEDED:
            self.audit.update(job.id, result=o.result, **fields)
            signals.send(signals.job_succeeded, attempt=job.token, worker_id=self.worker_id,
                         result=o.result, duration=o.duration_s, **base)
            return
        if status is JobStatus.RETRYING:
            fields["run_at"] = o.finished_at + timedelta(milliseconds=o.retry_delay_ms or 0)
            fields["finished_at"] = None
        self.audit.update(job.id, error_type=o.error_type, last_error=o.error,
                          traceback=o.traceback, **fields)
        self.audit.attempt(job_id=job.id, number=job.token, outcome=status,
                           started_at=o.started_at, finished_at=o.finished_at,
                           error_type=o.error_type, error=o.error, traceback=o.traceback,
                           worker_id=self.worker_id)
        if status is JobStatus.RETRYING:
            signals.send(signals.job_retrying, attempt=job.token, worker_id=self.worker_id,
                         error=o.error, error_type=o.error_type, retry_at=fields["run_at"],
                         **base)
        elif status is JobStatus.DEAD:
            logger.error("job %s %s is dead after %d attempt(s): %s: %s", job.id, o.path,
                         job.token, o.error_type, o.error)
            signals.send(signals.job_dead, attempt=job.token, worker_id=self.worker_id,
                         error=o.error, error_type=o.error_type, **base)
        else:
            signals.send(signals.job_cancelled, running=True, **base)

    def recover(self, queue: str) -> None:
        """Take back expired leases (bounded batches) and record the lost attempts."""
        for _ in range(10):
            # Jobs keep their max_attempts in the audit row: read those of the leases that
            # are about to be taken back (a margin covers clock skew with Redis).
            expiring = self.engine.expiring(queue, within_ms=5000, limit=100)
            limits = payloads.max_attempts(expiring) if expiring else {}
            found = self.engine.recover(queue, limit=100,
                                        default_max_attempts=self.settings.default_max_attempts,
                                        dead_max=self.settings.dead_max, max_attempts=limits)
            now = datetime.now(UTC)
            for r in found:
                status = _STATUS_OF.get(r.outcome)
                if status is None:
                    continue
                logger.warning("job %s: %s (attempt %d) -> %s", r.id, LOST_LEASE, r.attempts,
                               status)
                fields: dict[str, Any] = dict(status=status, attempts=r.attempts,
                                              error_type=LEASE_LOST, last_error=LOST_LEASE,
                                              traceback="", updated_at=now)
                fields["run_at" if status is JobStatus.RETRYING else "finished_at"] = now
                self.audit.update(r.id, **fields)
                self.audit.attempt(job_id=r.id, number=r.attempts, outcome=status,
                                   finished_at=now, error_type=LEASE_LOST, error=LOST_LEASE)
                self._recovered_signal(queue, r.id, status, r.attempts, now)
            if len(found) < 100:
                return

    def _recovered_signal(self, queue: str, job_id: str, status: JobStatus, attempt: int,
                          now: datetime) -> None:
        base = dict(job_id=job_id, queue=queue, callable_path="")
        if status is JobStatus.RETRYING:
            signals.send(signals.job_retrying, attempt=attempt, worker_id="", error=LOST_LEASE,
                         error_type=LEASE_LOST, retry_at=now, **base)
        elif status is JobStatus.DEAD:
            signals.send(signals.job_dead, attempt=attempt, worker_id="", error=LOST_LEASE,
                         error_type=LEASE_LOST, **base)
        else:
            signals.send(signals.job_cancelled, running=True, **base)

    def heartbeat(self, held: list[ClaimedJob], options: Any, claimed: int) -> None:
        """Extend the leases of held jobs and publish this worker's liveness."""
        by_queue: dict[str, list[ClaimedJob]] = {}
        for job in held:
            by_queue.setdefault(job.queue, []).append(job)
        failed: list[Exception] = []
        for queue, jobs in by_queue.items():
            try:  # each queue on its own: on a cluster, one node down must not cost the
                results = self.engine.extend(queue, [(j.id, j.token) for j in jobs],
                                             self.settings.lease_ms)  # others their leases
            except ERRORS as exc:
                failed.append(exc)
                continue
            for job, ok in zip(jobs, results):
                if not ok:
                    logger.warning("job %s: lease lost while held by this worker", job.id)
        info = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                           "queues": list(options.queues), "concurrency": options.concurrency,
                           "started": self.started_ts.isoformat(), "running": len(held),
                           "claimed": claimed, "processed": self.processed})
        self.engine.register_worker(self.worker_id, info)
        if failed:
            raise failed[0]

    def unregister(self) -> None:
        try:
            self.engine.unregister_worker(self.worker_id)
        except Exception:  # noqa: BLE001 - best effort on the way out
            logger.debug("could not unregister worker %s", self.worker_id)


def _path_of(job: ClaimedJob) -> str:
    try:
        return payloads.of(job).path
    except ValueError:
        return ""


_STATUS_OF = {
    NackOutcome.RETRYING: JobStatus.RETRYING,
    NackOutcome.DEAD: JobStatus.DEAD,
    NackOutcome.CANCELLED: JobStatus.CANCELLED,
}
