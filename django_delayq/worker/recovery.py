"""Lease recovery: taking back the leases that expired and recording the lost attempts.

A job whose worker died, or stopped heartbeating, keeps its lease until it expires; the
main loop of every worker then takes it back (``Engine.recover``, bounded batches of 100,
at most ten per queue and round). Redis decides what becomes of each job, as for a nack:
retried, dead (no attempts left) or cancelled. The attempt is recorded as failed with
``error_type`` ``django_delayq.exceptions.LeaseLost`` and ``LOST_LEASE`` as its message,
with no worker id: the worker that lost it is gone or no longer owns it.

A job's ``max_attempts`` lives in its audit row, not in Redis: the rows of the leases
about to expire (``Engine.expiring``, a margin for clock skew with Redis: ``margin_ms``)
are read first and passed along.

With the default ``LEASE_SECONDS`` (6 s, extended every 2 s by the heartbeat thread) and
``RECOVER_INTERVAL_SECONDS`` (1 s), a killed worker's jobs are taken back 4-7 s after the
kill and claimed again at once (``recover.lua`` publishes them as due now).

A lease that expired because nobody could reach Redis (Redis stalled, or a network cut)
is not a dead worker's: every live worker extends its leases again within a heartbeat
once Redis answers. So a worker takes leases back only after an unbroken run of half a
lease of recover calls on the queue (``Contact``, checked by recover.lua on the server
clock; a gap of more than half a lease, or two recovery intervals, breaks the run): after
a stall, the live holders re-extend first and only the dead ones' leases are taken back.
A worker just started waits that long too. A stall shorter than the gap goes unnoticed,
which is safe while the gap is under the two thirds of a lease a held lease always has
left: ``RECOVER_INTERVAL_SECONDS`` at most a quarter of ``LEASE_SECONDS`` (1 s and 6 s by
default).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django_delayq import signals
from django_delayq.core import payloads
from django_delayq.engine.outcomes import Contact, NackOutcome
from django_delayq.models import JobStatus
from django_delayq.worker.outcome import LEASE_LOST, LOST_LEASE, STATUS_OF

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.worker.audit import AuditWriter

logger = logging.getLogger(__name__)


BATCH = 100
ROUNDS = 10  # batches per queue and call: a large backlog of lapsed leases is spread out


class LeaseRecovery:
    def __init__(self, engine: Engine, settings: Settings, audit: AuditWriter) -> None:
        self.engine, self.settings, self.audit = engine, settings, audit
        self._contact: dict[str, Contact] = {}  # per queue: this worker's run of calls

    @property
    def margin_ms(self) -> int:
        """How far ahead of this host's clock a lease counts as expiring (skew with Redis):
        a third of the lease, at most 5 s. A held lease always has more than two thirds of
        it left (it is extended every third), so rows are read only for leases whose
        worker missed a heartbeat, not for every job running."""
        return min(5000, self.settings.lease_ms // 3)

    def recover(self, queue: str) -> None:
        """Take back expired leases (bounded batches) and record the lost attempts."""
        for _ in range(ROUNDS):
            # Jobs keep their max_attempts in the audit row: read those of the leases that
            # are about to be taken back (a margin covers clock skew with Redis).
            expiring = self.engine.expiring(queue, within_ms=self.margin_ms, limit=BATCH)
            limits = payloads.max_attempts(expiring) if expiring else {}
            contact = self._contact.setdefault(queue, self._new_contact())
            found = self.engine.recover(queue, limit=BATCH,
                                        default_max_attempts=self.settings.default_max_attempts,
                                        dead_max=self.settings.dead_max, max_attempts=limits,
                                        contact=contact)
            now = datetime.now(UTC)
            for r in found:
                status = STATUS_OF.get(r.outcome)
                if status is not None:
                    self._record(queue, r.id, status, r.attempts, now)
                elif r.outcome is NackOutcome.NOT_STARTED:
                    logger.info("job %s: claimed by a worker that stopped before starting it; "
                                "due again, no attempt charged (%d run so far)", r.id, r.attempts)
            if len(found) < BATCH:
                return

    def _new_contact(self) -> Contact:
        """Half a lease of unbroken calls; a gap of more than half a lease, or of two
        recovery intervals if longer (the calls' own spacing), breaks the run."""
        lease_ms = self.settings.lease_ms
        interval_ms = int(self.settings.recover_interval_seconds * 1000)
        return Contact(need_ms=lease_ms // 2, gap_ms=max(lease_ms // 2, 2 * interval_ms))

    def _record(self, queue: str, job_id: str, status: JobStatus, attempt: int,
                now: datetime) -> None:
        logger.warning("job %s: %s (attempt %d) -> %s", job_id, LOST_LEASE, attempt, status)
        fields: dict[str, Any] = {"status": status, "attempts": attempt, "error_type": LEASE_LOST,
                                  "last_error": LOST_LEASE, "traceback": "", "updated_at": now}
        fields["run_at" if status is JobStatus.RETRYING else "finished_at"] = now
        self.audit.update(job_id, **fields)
        self.audit.attempt(job_id=job_id, number=attempt, outcome=status,
                           finished_at=now, error_type=LEASE_LOST, error=LOST_LEASE)
        base = {"job_id": job_id, "queue": queue, "callable_path": ""}
        if status is JobStatus.RETRYING:
            signals.send(signals.job_retrying, attempt=attempt, worker_id="", error=LOST_LEASE,
                         error_type=LEASE_LOST, retry_at=now, **base)
        elif status is JobStatus.DEAD:
            signals.send(signals.job_dead, attempt=attempt, worker_id="", error=LOST_LEASE,
                         error_type=LEASE_LOST, **base)
        else:
            signals.send(signals.job_cancelled, running=True, **base)
