"""Execution: the job threads (``delayq-exec-N``), each running one claimed job at a time.

A thread takes the next job from the handover (``handover.py``: by priority, due time,
claim order), marks it started in the ledger (``ledger.py``), asks the start gate
whether it may start (``gates.StartGate``: expired? refused by a callable limit?), has
its start recorded (``Settler.started``: the start mark, the row ``running``), runs it
(``runner.py``) and hands its outcome to the settlement (``settlement.py``), which acks
it at once on this thread when it may. No failure of ours stops a thread: the job ends
dead with it.

Time limits (``Settings.timeout_for``): the main loop calls ``expire_overdue``, which fails
the attempts running past theirs; their threads stay busy until the function returns.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from django.db import connections

from django_delayq.worker import gates, runner
from django_delayq.worker.ledger import Ledger, key_of
from django_delayq.worker.outcome import Outcome, crashed

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine.outcomes import ClaimedJob
    from django_delayq.worker.handover import Handover
    from django_delayq.worker.settlement import Settlement

logger = logging.getLogger(__name__)


class Execution:
    """Who runs: ``concurrency`` job threads (``start``; ``stop`` ends them once the jobs
    handed over before it have run)."""

    def __init__(self, settings: Settings, gate: gates.StartGate, ledger: Ledger,
                 handover: Handover, settlement: Settlement, *, worker_id: str,
                 concurrency: int) -> None:
        self.settings = settings
        self.gate = gate  # expiry, callable limits
        self.ledger, self.handover, self.settlement = ledger, handover, settlement
        self.worker_id, self.concurrency = worker_id, concurrency
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self.concurrency):
            t = threading.Thread(target=self._run, name="delayq-exec-%d" % i, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self.handover.stop_threads(len(self._threads))
        for t in self._threads:
            t.join(timeout=5)

    def _run(self) -> None:
        while True:
            job = self.handover.next_job()
            if job is None:
                connections.close_all()  # this thread's connections, not the caller's
                return
            key = key_of(job)
            if not self.ledger.start(key, self.gate.time_limit(job)):
                continue  # released during drain
            admitted: gates.Admission | None = None
            try:
                admitted = self.gate.admit(job)  # expired? refused by a callable limit?
                outcome = admitted.ended or self._attempt(job, admitted)
            except Exception as exc:  # noqa: BLE001 - the job ends dead; the thread lives on
                logger.exception("job %s: the worker failed around its attempt", job.id)
                outcome = crashed(job, exc)
                if admitted is not None:  # its callable-limit slot, freed once settled
                    outcome.callable_limit = admitted.callable_limit
            self.ledger.finish(key, outcome)
            self.settlement.finished()  # acked now, on this thread

    def _attempt(self, job: ClaimedJob, admitted: gates.Admission) -> Outcome:
        self.settlement.wait_recorded(job.id)  # a quick retry sees its previous attempt
        if self.settlement.settler.started(job, keep_due=admitted.limited):
            outcome = runner.run(job, worker_id=self.worker_id,
                                 default_max_attempts=self.settings.default_max_attempts,
                                 default_backoff=self.settings.default_backoff)
        else:  # no start mark (Redis unreachable): not run, its row untouched
            outcome = self.gate.retry_later(job)
        outcome.callable_limit = admitted.callable_limit  # its slot, freed once settled
        return outcome

    # -- time limits (the main loop's) ---------------------------------------------

    def expire_overdue(self) -> None:
        """Fail attempts running past their time limit (``Settings.timeout_for``): stop
        heartbeating them (their lease is not extended again), settle them as failures."""
        overdue = self.ledger.time_out_limits(time.monotonic(), lambda job, at, s: runner.timed_out(
            job, started_at=at, seconds=s, default_max_attempts=self.settings.default_max_attempts,
            default_backoff=self.settings.default_backoff))
        for job in overdue:
            logger.warning("job %s: still running past its time limit; failing this attempt "
                           "(its thread stays busy until the function returns)", job.id)

    def wait_ms(self, wait_ms: float) -> float:
        """``wait_ms``, or less: until the earliest time limit of a running attempt (the main
        loop fails an overdue attempt on time)."""
        if (limit := self.ledger.next_limit()) is not None:
            wait_ms = min(wait_ms, (limit - time.monotonic()) * 1000 + 1)
        return wait_ms
