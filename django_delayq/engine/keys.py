"""Every Redis key of one queue, under one hash tag (one Redis Cluster slot)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Key names of queue ``queue`` under ``prefix``: all share ``{prefix:queue}``."""

    prefix: str
    queue: str

    @property
    def tag(self) -> str:
        return "{%s:%s}" % (self.prefix, self.queue)

    @property
    def pending(self) -> str:
        return self.tag + ":pending"

    @property
    def inflight(self) -> str:
        return self.tag + ":inflight"

    @property
    def jobs(self) -> str:
        return self.tag + ":jobs"

    @property
    def attempts(self) -> str:
        return self.tag + ":attempts"

    @property
    def cancel(self) -> str:
        return self.tag + ":cancel"

    @property
    def dead(self) -> str:
        return self.tag + ":dead"

    @property
    def channel(self) -> str:
        """Pub/Sub channel told the new earliest due time of the queue."""
        return self.tag + ":wake"

    def all(self) -> tuple[str, ...]:
        return (self.pending, self.inflight, self.jobs, self.attempts, self.cancel, self.dead)
