"""Housekeeping: what keeps leases, the registry and the rows in order besides the jobs.

- The heartbeat thread (``delayq-heartbeat``, nothing else on it) every ``LEASE_SECONDS /
  3``: extends the leases of the jobs held and publishes the worker in the registry
  (``heartbeat.py``: ``Liveness``), renews the callable-limit slots of the functions
  running (``gates.StartGate.renew``).
- The keeper thread (``delayq-keeper``), every half second (at most a third of a lease),
  not while draining: retention (``retention.py``), then the schedules' pass
  (``core/periodic.py``), then the reconciler (``core/reconcile.py``); at once again while
  a loss pass has rows left (it works in slices of half a second), so a pass after a
  loss never holds the schedules' pass back longer than a slice.
- Lease recovery (``recovery.py``), on the main loop (``recover``) every
  ``RECOVER_INTERVAL_SECONDS``, queue by queue through the claims' per-queue backoff.

Neither a busy main loop nor a slow reconcile or retention round can let this worker's
leases lapse (which would run its jobs twice), and a reconcile pass cannot delay a due job.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from django.db import connections
from redis.exceptions import RedisError

from django_delayq.core.reconcile import Reconciler
from django_delayq.worker.audit import AuditWriter, OutageLog
from django_delayq.worker.claiming import Claiming, monotonic_ms
from django_delayq.worker.heartbeat import Liveness
from django_delayq.worker.recovery import LeaseRecovery
from django_delayq.worker.retention import Retention

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.core.periodic import Keeper
    from django_delayq.engine import Engine
    from django_delayq.worker.gates import StartGate
    from django_delayq.worker.ledger import Ledger
    from django_delayq.worker.settlement import Settlement
    from django_delayq.worker.tracking import Supervision

logger = logging.getLogger(__name__)


class Housekeeping:
    """Who keeps house: the heartbeat and keeper threads (``start``, ``stop``) and the main
    loop's lease recovery (``recover``)."""

    def __init__(self, engine: Engine, settings: Settings, ledger: Ledger,
                 audit: AuditWriter, *, gate: StartGate, claiming: Claiming, schedules: Keeper,
                 settlement: Settlement, worker_id: str, name: str, concurrency: int,
                 supervision: Supervision | None) -> None:
        self.settings, self.ledger, self.gate = settings, ledger, gate
        self.claiming, self.settlement = claiming, settlement
        self.queues = claiming.queues
        self.liveness = Liveness(engine, settings, worker_id, name=name, queues=self.queues,
                                 concurrency=concurrency, running=ledger.running_jobs,
                                 waiting=ledger.waiting, supervision=supervision)
        self.recovery = LeaseRecovery(engine, settings, audit)
        self.reconciler = Reconciler(engine, settings, self.queues)
        self.retention = Retention(engine, settings, worker_id)  # old rows, dead workers
        self.schedules = schedules  # the keeper thread's pass (core/periodic.py)
        self.draining = False  # no keeper pass once set (by a signal handler)
        self._last_recover = -1e18
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._reconcile_outage = OutageLog(logger, "reconciler tick")

    def start(self) -> None:
        for target, name in ((self._keeper_loop, "delayq-keeper"),
                             (self._beat_loop, "delayq-heartbeat")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    # -- lease recovery, on the main loop ------------------------------------------

    def recover(self) -> None:
        now = monotonic_ms()
        if now - self._last_recover >= self.settings.recover_interval_seconds * 1000:
            self.claiming.backoff.each(self.queues, self.recovery.recover)
            self._last_recover = now  # after it worked: a failed recovery is retried next round

    def wait_ms(self, wait_ms: float) -> float:
        """``wait_ms``, or less: until the next recovery is due."""
        return min(wait_ms, self._last_recover + self.settings.recover_interval_seconds * 1000
                   - monotonic_ms())

    # -- the threads ---------------------------------------------------------------

    def _beat_loop(self) -> None:
        """Heartbeats every ``LEASE_SECONDS / 3``, on a thread that does nothing else: neither
        a busy main loop nor a slow reconcile or retention round can let the leases lapse."""
        beat_s = self.settings.lease_ms / 3000
        while True:
            try:
                self.liveness.heartbeat(self.ledger.held(),
                                        claimed=self.claiming.handover.claimed_total,
                                        processed=self.settlement.settler.processed,
                                        holding=lambda: self.ledger.held(sent=False))
                self.gate.renew()  # callable-limit slots of the functions running
            except Exception as exc:  # noqa: BLE001 - Redis down: try again next beat
                logger.warning("heartbeat failed: %s", exc)
            if self._stop.wait(beat_s):
                return

    def _keeper_loop(self) -> None:
        """Retention and the reconciler, on their own thread: not held up by the main loop."""
        beat_s = self.settings.lease_ms / 3000
        while not self._stop.is_set():
            if not self.draining:
                self.schedules.tick(self.retention.tick)  # retention, then schedules
                try:
                    self.reconciler.tick()
                except RedisError as exc:  # the main loop reports outages; try next time
                    logger.debug("reconciler: Redis unavailable: %s", exc)
                except Exception as exc:  # noqa: BLE001 - never let the keeper die
                    self._reconcile_outage.failed(exc, min(beat_s, 0.5))
                else:
                    self._reconcile_outage.ok()
                    if self.reconciler.busy:  # a loss pass in slices: schedules between them
                        continue
            self._stop.wait(min(beat_s, 0.5))
        connections.close_all()  # this thread's own database connections
