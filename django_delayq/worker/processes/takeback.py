"""Taking back the jobs of a child worker process that is gone, without waiting for leases.

When a child exits, its supervisor knows from its reports (``worker/tracking.py``) which jobs it
still held. Each is settled at once, by what became of it:

- the job the supervisor killed the child for: its attempt fails now, with
  ``error_type`` ``django_delayq.exceptions.JobTimeout`` (past its time limit; retried or
  dead by its policy) or as cancelled (its cancel was asked while it ran: ``nack`` finds
  the cancel mark, the job ends ``cancelled``, "cancelled while it ran", not retried).
  The supervisor kills a child for a job only once no other job of it runs or waits to
  be settled (``children.Child.ripe``), so no other job is cut short by that kill;
- the running jobs of a child killed because its heartbeat fell silent (a job holding
  the GIL starves it) before its leases lapsed: their attempt fails with ``error_type``
  ``django_delayq.exceptions.LeaseLost``, as the lapsed lease would have (which job held
  the GIL cannot be told; each is retried or dead by its policy), but no other worker
  ran them meanwhile;
- the running jobs of a child that died otherwise (on its own: killed by someone else,
  crashed, out of memory; or stopped hard), and those that finished but were not settled
  yet: their attempt fails with ``error_type`` ``django_delayq.exceptions.LeaseLost``,
  retried or dead by their policy, as an expired lease would be, only sooner: every run
  is charged its attempt and has its ``JobAttempt``, and a job that kills its process is
  not retried forever. A job that ran is never handed back uncharged;
- jobs it held but had not started: handed back (``Engine.release``: due again at once,
  no attempt charged). After a clean exit (0: drained, recycled) the child settled
  everything itself; a report lost with it (the last ``tracking.FLUSH_S``) makes a job
  look held, and its release is refused by Redis.

A job that ran and whose cancel was asked meanwhile is settled from its row's id, queue
and callable (``payloads.read`` sorts it as *cancelled*, with no payload): ``nack`` ends
it cancelled, its attempt recorded; it is never handed back to be settled later as
"cancelled before it started".

Redis decides, as for every settlement: a job the child settled after all (its report
lost with the process) carries a token Redis no longer accepts, and is left alone. When
Redis or the database is down, nothing is lost: the leases expire and recovery takes
the jobs back as for any dead worker.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django_delayq.core import payloads
from django_delayq.models import Job, JobStatus
from django_delayq.worker import runner
from django_delayq.worker.outcome import LEASE_LOST
from django_delayq.worker.processes.children import Child, describe_exit
from django_delayq.worker.queue_backoff import grouped
from django_delayq.worker.settle import Settler
from django_delayq.worker.tracking import EXIT_OK, RunningJob

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.engine.outcomes import ClaimedJob
    from django_delayq.worker.audit import AuditWriter
    from django_delayq.worker.ledger import Key
    from django_delayq.worker.outcome import Outcome

logger = logging.getLogger(__name__)

TIMED_OUT = "timed out"
CANCELLED = "cancelled"
SILENT = "heartbeat silent"
KILLED = {  # why -> (error_type, error) of the attempt its process was killed for
    CANCELLED: ("", "cancelled while it ran: its process was killed"),
    SILENT: (LEASE_LOST, "its worker process stopped heartbeating (a job holding the GIL?): "
             "killed before its leases lapsed"),
}


Failure = tuple[RunningJob, str]  # its run, why it failed


class TakeBack:
    def __init__(self, engine: Engine, settings: Settings, audit: AuditWriter) -> None:
        self.engine, self.settings, self.audit = engine, settings, audit

    def child_gone(self, child: Child, code: int) -> None:
        """Settle every job ``child`` (exited with ``code``) still held."""
        if not child.held:
            return
        failed: list[Failure] = []
        back: list[ClaimedJob] = []
        for key, job in child.held.items():
            run = child.running.get(key) or child.ended.get(key)
            if run is None:
                back.append(job)
            elif code != EXIT_OK:  # after a clean exit it settled what it ran itself
                failed.append((run, why_failed(child, key, code)))
        self._settle(child, failed, back)

    def _outcome(self, job: ClaimedJob, run: RunningJob, why: str) -> Outcome:
        """The failure of ``run``, whose job (with its payload) is ``job``."""
        outcome = runner.timed_out(job, run.started_at, run.limit or 0.0)
        if why == TIMED_OUT:  # a failure of type JobTimeout, as timed_out made it
            outcome.error = ("timed out: still running after its %gs time limit; its "
                             "process was killed" % (run.limit or 0.0))
        else:
            outcome.error_type, outcome.error = KILLED.get(why) or (
                LEASE_LOST, "the worker process running it died (%s)" % why)
        return outcome

    def _settle(self, child: Child, failed: list[Failure], back: list[ClaimedJob]) -> None:
        loaded = payloads.read([run.job for run, _ in failed])  # none: no query
        # one cancelled while it ran is settled, never handed back
        usable = {job.id: job for job in [*loaded.run, *loaded.cancelled]}
        outcomes = [self._outcome(usable[run.job.id], run, why)
                    for run, why in failed if run.job.id in usable]
        _paths(outcomes)
        # no live row: handed back, and the next claim sets it aside
        self._hand_back(child, back + [run.job for run, _ in failed if run.job.id not in usable])
        if outcomes:
            Settler(self.engine, self.settings, self.audit, child.worker_id).settle(outcomes)
            for o in outcomes:
                logger.warning("job %s: %s%s", o.job.id, o.error,
                               " (%s)" % o.error_type if o.error_type else "")
        self.audit.flush()

    def _hand_back(self, child: Child, jobs: list[ClaimedJob]) -> None:
        now = datetime.now(UTC)
        started = [job for job in jobs if (job.queue, job.id) in child.running]
        for job in started:  # before Redis: a new claim's "running" must come after this
            self.audit.update(job.id, status=JobStatus.SCHEDULED, started_at=None,
                              worker_id="", updated_at=now)
        if started:
            self.audit.flush()
        for queue, claimed in grouped(jobs, lambda job: job.queue).items():
            self.engine.release(queue, claimed)
        if jobs:
            logger.info("handed back %d job(s) of worker process %d (%d had started)",
                        len(jobs), child.pid, len(started))


def why_failed(child: Child, key: Key, code: int) -> str:
    """Why the attempt of ``key``, which ran in ``child`` (gone with ``code``), failed:
    what it was doomed or killed for, else how the process ended."""
    if key in child.running and key in child.doomed:
        return child.doomed[key]
    return child.killed_for.get(key) or describe_exit(code)


def _paths(outcomes: list[Outcome]) -> None:
    """The callable of each outcome without a payload (a job cancelled while it ran: its
    row is read only for it), for the logs and signals of its settlement."""
    missing = [o for o in outcomes if not o.path]
    if not missing:
        return
    paths = dict(Job.objects.filter(pk__in=[o.job.id for o in missing])
                 .values_list("pk", "callable_path"))
    for o in missing:
        o.path = paths.get(o.job.id, "")
