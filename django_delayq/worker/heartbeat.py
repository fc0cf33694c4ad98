"""Worker liveness: extending the leases this worker holds and publishing that it lives.

The heartbeat thread (``housekeeping.py``) calls ``heartbeat`` every ``LEASE_SECONDS /
3`` with the jobs the worker holds (running or waiting for a thread). Each queue's leases
are extended on their own: on a cluster, one node down must not cost the other queues
their leases. A lease that could not be extended was already taken back (the job is
redelivered) and is logged. The worker's info (host, pid, queues, concurrency, start time,
jobs held, claimed and settled; ``supervisor``: the id of the ``delayq_worker --processes`` that
started it, or null; ``processes``: how many children that supervisor runs, else 1;
``jobs``: the running jobs, longest-running first, at most 50, each ``{"id", "queue",
"callable", "started_ms"}``) is then published under its id (``Engine.register_worker``): the
reconcilers wait for a registered worker's audit flush instead of re-enqueueing rows it
settled, and ``delayq_status`` lists the live workers from it.

Under ``delayq_worker --processes`` each heartbeat is also told to the supervisor
(``tracking.Link.beat``, never blocking on the socket), besides the link's own beats
every half second, which go on during a Redis stall: a child whose beats stop while it
holds jobs (a job holding the GIL starves every thread) is killed before its leases
lapse.

``unregister`` removes the worker on a clean exit, best effort: one that cannot be
removed falls silent, as a crashed worker would.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django_delayq.worker.queue_backoff import ERRORS, grouped

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.engine.outcomes import ClaimedJob
    from django_delayq.worker.ledger import RunningJob
    from django_delayq.worker.tracking import Supervision

MAX_JOBS_SHOWN = 50

logger = logging.getLogger(__name__)


class Liveness:
    def __init__(self, engine: Engine, settings: Settings, worker_id: str, *, name: str = "",
                 queues: tuple[str, ...], concurrency: int,
                 running: Callable[[], list[RunningJob]] | None = None,
                 waiting: Callable[[], int] | None = None, supervision: Supervision | None = None
                 ) -> None:
        self.engine, self.settings, self.worker_id = engine, settings, worker_id
        self.name = name or worker_id
        self.queues, self.concurrency = queues, concurrency
        self.started_ts = datetime.now(UTC)
        self.running, self.waiting, self.supervision = running, waiting, supervision

    def heartbeat(self, held: list[ClaimedJob], *, claimed: int, processed: int,
                  holding: Callable[[], list[ClaimedJob]] | None = None) -> None:
        """Extend the leases of held jobs and publish this worker's liveness; under a
        supervisor, tell it the heartbeat ran (``tracking.Link.beat``). ``holding``: what
        the worker holds now; a lease not extended is reported lost only when its job is
        still held (one settled since ``held`` was read has simply ended)."""
        beat_at = time.monotonic()
        failed: list[Exception] = []
        lost: list[ClaimedJob] = []
        for queue, jobs in grouped(held, lambda job: job.queue).items():
            try:  # each queue on its own: on a cluster, one node down must not cost the
                results = self.engine.extend(queue, [(j.id, j.token) for j in jobs],
                                             self.settings.lease_ms)  # others their leases
            except ERRORS as exc:
                failed.append(exc)
                continue
            lost += [job for job, ok in zip(jobs, results) if not ok]
        if lost and holding is not None:
            now_held = {(j.queue, j.id, j.token) for j in holding()}
            lost = [j for j in lost if (j.queue, j.id, j.token) in now_held]
        for job in lost:
            logger.warning("job %s: lease lost while held by this worker", job.id)
        if self.supervision is not None:  # the leases run from beat_at at least
            self.supervision.link.beat(beat_at)
        self.engine.register_worker(self.worker_id, self.info(held, claimed, processed))
        if failed:
            raise failed[0]

    def info(self, held: list[ClaimedJob], claimed: int, processed: int) -> str:
        """This worker's registry entry (JSON)."""
        sup = self.supervision
        runs = self.running() if self.running is not None else []
        return json.dumps({
            "name": self.name, "host": socket.gethostname(), "pid": os.getpid(),
            "queues": list(self.queues),
            "concurrency": self.concurrency, "started": self.started_ts.isoformat(),
            # running: jobs a thread runs; waiting: claimed, no thread yet (prefetch)
            "running": len(runs) if self.running is not None else len(held),
            "waiting": self.waiting() if self.waiting is not None else 0,
            "claimed": claimed, "processed": processed,
            "supervisor": sup.supervisor_id if sup is not None else None,
            "processes": sup.processes if sup is not None else 1,
            "jobs": [r.info() for r in runs[:MAX_JOBS_SHOWN]]})

    def unregister(self) -> None:
        try:
            self.engine.unregister_worker(self.worker_id)
        except Exception:  # noqa: BLE001 - best effort on the way out
            logger.debug("could not unregister worker %s", self.worker_id)
